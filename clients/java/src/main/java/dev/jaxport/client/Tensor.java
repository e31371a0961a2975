package dev.jaxport.client;

import com.google.protobuf.ByteString;
import dev.jaxport.inference.InferTensorContents;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Map;

/**
 * One named tensor: an Open Inference Protocol datatype, a shape and the flattened row-major
 * elements as little-endian bytes, exactly as they travel in raw_input_contents /
 * raw_output_contents. Build one with the typed factories ({@link #ofFloat32}, ...) and read one
 * with the typed accessors ({@link #asFloat32()}, ...). Immutable.
 */
public final class Tensor {
  private static final Map<String, Integer> ITEM_SIZES =
      Map.ofEntries(
          Map.entry("BOOL", 1), Map.entry("UINT8", 1), Map.entry("INT8", 1),
          Map.entry("UINT16", 2), Map.entry("INT16", 2), Map.entry("FP16", 2),
          Map.entry("BF16", 2), Map.entry("UINT32", 4), Map.entry("INT32", 4),
          Map.entry("FP32", 4), Map.entry("UINT64", 8), Map.entry("INT64", 8),
          Map.entry("FP64", 8));

  private final String name;
  private final String datatype;
  private final long[] shape;
  private final ByteString raw;

  private Tensor(String name, String datatype, long[] shape, ByteString raw) {
    this.name = name;
    this.datatype = datatype;
    this.shape = shape.clone();
    this.raw = raw;
  }

  /** Bytes per element of a datatype; INVALID_ARGUMENT for one without a fixed size (BYTES). */
  public static int itemSize(String datatype) {
    Integer n = ITEM_SIZES.get(datatype);
    if (n == null) {
      throw ClientErrors.invalidArgument("unsupported datatype '" + datatype + "'");
    }
    return n;
  }

  /** Product of the dimensions (1 for a scalar). */
  public static long numElements(long[] shape) {
    long n = 1;
    for (long d : shape) {
      n *= d;
    }
    return n;
  }

  /** Wraps wire-form bytes without checking them (FP16/BF16, or deliberately odd requests). */
  public static Tensor raw(String name, String datatype, long[] shape, byte[] bytes) {
    return new Tensor(name, datatype, shape, ByteString.copyFrom(bytes));
  }

  static Tensor raw(String name, String datatype, long[] shape, ByteString bytes) {
    return new Tensor(name, datatype, shape, bytes);
  }

  private static ByteBuffer buffer(String name, long[] shape, int count, int itemSize) {
    if (numElements(shape) != count) {
      throw ClientErrors.invalidArgument(
          "tensor '" + name + "': shape " + Arrays.toString(shape) + " holds "
              + numElements(shape) + " elements, data has " + count);
    }
    return ByteBuffer.allocate(count * itemSize).order(ByteOrder.LITTLE_ENDIAN);
  }

  private static Tensor of(String name, String datatype, long[] shape, ByteBuffer buf) {
    return new Tensor(name, datatype, shape, ByteString.copyFrom(buf.array()));
  }

  public static Tensor ofFloat32(String name, long[] shape, float... data) {
    ByteBuffer b = buffer(name, shape, data.length, 4);
    for (float v : data) {
      b.putFloat(v);
    }
    return of(name, "FP32", shape, b);
  }

  public static Tensor ofFloat64(String name, long[] shape, double... data) {
    ByteBuffer b = buffer(name, shape, data.length, 8);
    for (double v : data) {
      b.putDouble(v);
    }
    return of(name, "FP64", shape, b);
  }

  public static Tensor ofInt8(String name, long[] shape, byte... data) {
    ByteBuffer b = buffer(name, shape, data.length, 1);
    b.put(data);
    return of(name, "INT8", shape, b);
  }

  public static Tensor ofInt16(String name, long[] shape, short... data) {
    ByteBuffer b = buffer(name, shape, data.length, 2);
    for (short v : data) {
      b.putShort(v);
    }
    return of(name, "INT16", shape, b);
  }

  public static Tensor ofInt32(String name, long[] shape, int... data) {
    ByteBuffer b = buffer(name, shape, data.length, 4);
    for (int v : data) {
      b.putInt(v);
    }
    return of(name, "INT32", shape, b);
  }

  public static Tensor ofInt64(String name, long[] shape, long... data) {
    ByteBuffer b = buffer(name, shape, data.length, 8);
    for (long v : data) {
      b.putLong(v);
    }
    return of(name, "INT64", shape, b);
  }

  /** UINT8 from values 0..255 (Java has no unsigned byte). */
  public static Tensor ofUint8(String name, long[] shape, int... data) {
    ByteBuffer b = buffer(name, shape, data.length, 1);
    for (int v : data) {
      if (v < 0 || v > 255) {
        throw ClientErrors.invalidArgument("tensor '" + name + "': UINT8 value " + v + " is outside 0..255");
      }
      b.put((byte) v);
    }
    return of(name, "UINT8", shape, b);
  }

  /** UINT16 from values 0..65535 (Java has no unsigned short). */
  public static Tensor ofUint16(String name, long[] shape, int... data) {
    ByteBuffer b = buffer(name, shape, data.length, 2);
    for (int v : data) {
      if (v < 0 || v > 0xffff) {
        throw ClientErrors.invalidArgument("tensor '" + name + "': UINT16 value " + v + " is outside 0..65535");
      }
      b.putShort((short) v);
    }
    return of(name, "UINT16", shape, b);
  }

  /** UINT32 from values 0..4294967295 (Java has no unsigned int). */
  public static Tensor ofUint32(String name, long[] shape, long... data) {
    ByteBuffer b = buffer(name, shape, data.length, 4);
    for (long v : data) {
      if (v < 0 || v > 0xffffffffL) {
        throw ClientErrors.invalidArgument("tensor '" + name + "': UINT32 value " + v + " is outside 0..4294967295");
      }
      b.putInt((int) v);
    }
    return of(name, "UINT32", shape, b);
  }

  /**
   * UINT64 from the 64 bits of each long, read as unsigned: values above {@code Long.MAX_VALUE}
   * are the negative longs ({@code Long.parseUnsignedLong("18446744073709551615")} is -1).
   */
  public static Tensor ofUint64(String name, long[] shape, long... data) {
    ByteBuffer b = buffer(name, shape, data.length, 8);
    for (long v : data) {
      b.putLong(v);
    }
    return of(name, "UINT64", shape, b);
  }

  public static Tensor ofBool(String name, long[] shape, boolean... data) {
    ByteBuffer b = buffer(name, shape, data.length, 1);
    for (boolean v : data) {
      b.put((byte) (v ? 1 : 0));
    }
    return of(name, "BOOL", shape, b);
  }

  /** BF16 from float values, each rounded to nearest-even bfloat16. */
  public static Tensor ofBFloat16(String name, long[] shape, float... data) {
    ByteBuffer b = buffer(name, shape, data.length, 2);
    for (float v : data) {
      b.putShort(HalfFloats.floatToBf16(v));
    }
    return of(name, "BF16", shape, b);
  }

  /** FP16 from float values, each rounded to nearest-even IEEE half. */
  public static Tensor ofFloat16(String name, long[] shape, float... data) {
    ByteBuffer b = buffer(name, shape, data.length, 2);
    for (float v : data) {
      b.putShort(HalfFloats.floatToFp16(v));
    }
    return of(name, "FP16", shape, b);
  }

  public String name() {
    return name;
  }

  public String datatype() {
    return datatype;
  }

  public long[] shape() {
    return shape.clone();
  }

  /** The little-endian element bytes. */
  public ByteString rawBytes() {
    return raw;
  }

  /** INVALID_ARGUMENT unless byte count == shape x itemsize. */
  public void validate() {
    long want = numElements(shape) * itemSize(datatype);
    if (want != raw.size()) {
      throw ClientErrors.invalidArgument(
          "tensor '" + name + "': " + datatype + Arrays.toString(shape) + " needs " + want
              + " bytes, have " + raw.size());
    }
  }

  private ByteBuffer read(String expected) {
    if (!datatype.equals(expected)) {
      throw ClientErrors.invalidArgument(
          "tensor '" + name + "' is " + datatype + ", not " + expected);
    }
    validate();
    return raw.asReadOnlyByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
  }

  public float[] asFloat32() {
    ByteBuffer b = read("FP32");
    float[] out = new float[b.remaining() / 4];
    b.asFloatBuffer().get(out);
    return out;
  }

  public double[] asFloat64() {
    ByteBuffer b = read("FP64");
    double[] out = new double[b.remaining() / 8];
    b.asDoubleBuffer().get(out);
    return out;
  }

  public byte[] asInt8() {
    ByteBuffer b = read("INT8");
    byte[] out = new byte[b.remaining()];
    b.get(out);
    return out;
  }

  public short[] asInt16() {
    ByteBuffer b = read("INT16");
    short[] out = new short[b.remaining() / 2];
    b.asShortBuffer().get(out);
    return out;
  }

  public int[] asInt32() {
    ByteBuffer b = read("INT32");
    int[] out = new int[b.remaining() / 4];
    b.asIntBuffer().get(out);
    return out;
  }

  public long[] asInt64() {
    ByteBuffer b = read("INT64");
    long[] out = new long[b.remaining() / 8];
    b.asLongBuffer().get(out);
    return out;
  }

  /** UINT8 as ints 0..255. */
  public int[] asUint8() {
    ByteBuffer b = read("UINT8");
    int[] out = new int[b.remaining()];
    for (int i = 0; i < out.length; i++) {
      out[i] = b.get(i) & 0xff;
    }
    return out;
  }

  /** UINT16 as ints 0..65535. */
  public int[] asUint16() {
    ByteBuffer b = read("UINT16");
    int[] out = new int[b.remaining() / 2];
    for (int i = 0; i < out.length; i++) {
      out[i] = b.getShort(2 * i) & 0xffff;
    }
    return out;
  }

  /** UINT32 as longs 0..4294967295. */
  public long[] asUint32() {
    ByteBuffer b = read("UINT32");
    long[] out = new long[b.remaining() / 4];
    for (int i = 0; i < out.length; i++) {
      out[i] = b.getInt(4 * i) & 0xffffffffL;
    }
    return out;
  }

  /** UINT64 as the 64 bits of each value ({@code Long.toUnsignedString} prints them unsigned). */
  public long[] asUint64() {
    ByteBuffer b = read("UINT64");
    long[] out = new long[b.remaining() / 8];
    b.asLongBuffer().get(out);
    return out;
  }

  public boolean[] asBool() {
    ByteBuffer b = read("BOOL");
    boolean[] out = new boolean[b.remaining()];
    for (int i = 0; i < out.length; i++) {
      out[i] = b.get(i) != 0;
    }
    return out;
  }

  /** BF16 widened to float (exact). */
  public float[] asBFloat16() {
    ByteBuffer b = read("BF16");
    float[] out = new float[b.remaining() / 2];
    for (int i = 0; i < out.length; i++) {
      out[i] = HalfFloats.bf16ToFloat(b.getShort(2 * i));
    }
    return out;
  }

  /** FP16 widened to float (exact). */
  public float[] asFloat16() {
    ByteBuffer b = read("FP16");
    float[] out = new float[b.remaining() / 2];
    for (int i = 0; i < out.length; i++) {
      out[i] = HalfFloats.fp16ToFloat(b.getShort(2 * i));
    }
    return out;
  }

  /** Any numeric or BOOL tensor as doubles, for comparisons and printing. */
  public double[] asDoubles() {
    validate();
    ByteBuffer b = raw.asReadOnlyByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
    int size = itemSize(datatype);
    double[] out = new double[raw.size() / size];
    for (int i = 0; i < out.length; i++) {
      int o = i * size;
      out[i] =
          switch (datatype) {
            case "BOOL", "UINT8" -> b.get(o) & 0xff;
            case "INT8" -> b.get(o);
            case "INT16" -> b.getShort(o);
            case "UINT16" -> b.getShort(o) & 0xffff;
            case "INT32" -> b.getInt(o);
            case "UINT32" -> b.getInt(o) & 0xffffffffL;
            case "INT64" -> b.getLong(o);
            case "UINT64" -> Double.parseDouble(Long.toUnsignedString(b.getLong(o)));
            case "FP16" -> HalfFloats.fp16ToFloat(b.getShort(o));
            case "BF16" -> HalfFloats.bf16ToFloat(b.getShort(o));
            case "FP32" -> b.getFloat(o);
            case "FP64" -> b.getDouble(o);
            default -> throw ClientErrors.invalidArgument("unsupported datatype " + datatype);
          };
    }
    return out;
  }

  /**
   * The protocol's typed {@code contents} for this tensor. FP16 and BF16 have no typed field
   * and can only travel raw (INVALID_ARGUMENT).
   */
  public InferTensorContents typedContents() {
    int size = itemSize(datatype);
    if (raw.size() % size != 0) {
      throw ClientErrors.invalidArgument(
          "tensor '" + name + "': " + raw.size() + " bytes is not a whole number of "
              + datatype + " elements");
    }
    ByteBuffer b = raw.asReadOnlyByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
    InferTensorContents.Builder c = InferTensorContents.newBuilder();
    for (int o = 0; o < raw.size(); o += size) {
      switch (datatype) {
        case "BOOL" -> c.addBoolContents(b.get(o) != 0);
        case "UINT8" -> c.addUintContents(b.get(o) & 0xff);
        case "UINT16" -> c.addUintContents(b.getShort(o) & 0xffff);
        case "UINT32" -> c.addUintContents(b.getInt(o));
        case "UINT64" -> c.addUint64Contents(b.getLong(o));
        case "INT8" -> c.addIntContents(b.get(o));
        case "INT16" -> c.addIntContents(b.getShort(o));
        case "INT32" -> c.addIntContents(b.getInt(o));
        case "INT64" -> c.addInt64Contents(b.getLong(o));
        case "FP32" -> c.addFp32Contents(b.getFloat(o));
        case "FP64" -> c.addFp64Contents(b.getDouble(o));
        default -> throw ClientErrors.invalidArgument(
            "tensor '" + name + "': " + datatype + " has no typed contents field; send it raw");
      }
    }
    return c.build();
  }

  /** Rebuilds a tensor from typed contents (servers may answer that way). */
  static Tensor fromContents(String name, String datatype, long[] shape, InferTensorContents c) {
    int size = itemSize(datatype);
    long n = numElements(shape);
    ByteBuffer b = ByteBuffer.allocate((int) (n * size)).order(ByteOrder.LITTLE_ENDIAN);
    int got;
    switch (datatype) {
      case "BOOL" -> {
        got = c.getBoolContentsCount();
        c.getBoolContentsList().forEach(v -> b.put((byte) (v ? 1 : 0)));
      }
      case "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32" -> {
        var list = datatype.startsWith("U") ? c.getUintContentsList() : c.getIntContentsList();
        got = list.size();
        for (int v : list) {
          switch (size) {
            case 1 -> b.put((byte) v);
            case 2 -> b.putShort((short) v);
            default -> b.putInt(v);
          }
        }
      }
      case "INT64" -> {
        got = c.getInt64ContentsCount();
        c.getInt64ContentsList().forEach(b::putLong);
      }
      case "UINT64" -> {
        got = c.getUint64ContentsCount();
        c.getUint64ContentsList().forEach(b::putLong);
      }
      case "FP32" -> {
        got = c.getFp32ContentsCount();
        c.getFp32ContentsList().forEach(b::putFloat);
      }
      case "FP64" -> {
        got = c.getFp64ContentsCount();
        c.getFp64ContentsList().forEach(b::putDouble);
      }
      default -> throw ClientErrors.internal(
          "output '" + name + "': " + datatype + " cannot travel in typed contents");
    }
    if (got != n) {
      throw ClientErrors.internal(
          "output '" + name + "': shape " + Arrays.toString(shape) + " needs " + n
              + " elements, typed contents hold " + got);
    }
    return new Tensor(name, datatype, shape, ByteString.copyFrom(b.array()));
  }

  @Override
  public String toString() {
    return "Tensor(" + name + ", " + datatype + Arrays.toString(shape) + ")";
  }
}
