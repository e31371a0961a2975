package dev.jaxport.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import org.junit.jupiter.api.Test;

class TensorTest {
  private static final long[] TWO = {2};

  @Test
  void typedRoundTrips() {
    assertArrayEquals(new float[] {1.5f, -2f}, Tensor.ofFloat32("a", TWO, 1.5f, -2f).asFloat32());
    assertArrayEquals(new double[] {1e300, -1}, Tensor.ofFloat64("a", TWO, 1e300, -1).asFloat64());
    assertArrayEquals(new long[] {Long.MIN_VALUE, 1L << 40}, Tensor.ofInt64("a", TWO, Long.MIN_VALUE, 1L << 40).asInt64());
    assertArrayEquals(new int[] {0, 255}, Tensor.ofUint8("a", TWO, 0, 255).asUint8());
    assertArrayEquals(new byte[] {-128, 127}, Tensor.ofInt8("a", TWO, (byte) -128, (byte) 127).asInt8());
    assertArrayEquals(new boolean[] {true, false}, Tensor.ofBool("a", TWO, true, false).asBool());
    assertArrayEquals(new float[] {0.5f, -3f}, Tensor.ofBFloat16("a", TWO, 0.5f, -3f).asBFloat16());
    assertArrayEquals(new float[] {0.5f, 65504f}, Tensor.ofFloat16("a", TWO, 0.5f, 65504f).asFloat16());
    assertArrayEquals(new short[] {Short.MIN_VALUE, 7}, Tensor.ofInt16("a", TWO, Short.MIN_VALUE, (short) 7).asInt16());
    assertArrayEquals(new int[] {0, 65535}, Tensor.ofUint16("a", TWO, 0, 65535).asUint16());
    assertArrayEquals(new long[] {0, 4294967295L}, Tensor.ofUint32("a", TWO, 0, 4294967295L).asUint32());
    long max = Long.parseUnsignedLong("18446744073709551615");
    assertArrayEquals(new long[] {max, 1}, Tensor.ofUint64("a", TWO, max, 1).asUint64());
    assertEquals("18446744073709551615", Long.toUnsignedString(Tensor.ofUint64("a", new long[] {1}, max).asUint64()[0]));
  }

  @Test
  void unsignedWireBytes() {
    assertArrayEquals(new byte[] {-1, -1}, Tensor.ofUint16("x", new long[] {1}, 65535).rawBytes().toByteArray());
    assertArrayEquals(new byte[] {-1, -1, -1, -1}, Tensor.ofUint32("x", new long[] {1}, 4294967295L).rawBytes().toByteArray());
    assertArrayEquals(new byte[] {1, 0}, Tensor.ofInt16("x", new long[] {1}, (short) 1).rawBytes().toByteArray());
  }

  @Test
  void wireBytesAreLittleEndian() {
    assertArrayEquals(new byte[] {0, 0, (byte) 0x80, 0x3f}, Tensor.ofFloat32("x", new long[] {1}, 1f).rawBytes().toByteArray());
    assertArrayEquals(new byte[] {(byte) 0xfe, -1, -1, -1}, Tensor.ofInt32("x", new long[] {1}, -2).rawBytes().toByteArray());
  }

  @Test
  void halfConversionsMatchKnownBitPatterns() {
    assertEquals((short) 0x3f80, HalfFloats.floatToBf16(1f));
    assertEquals((short) 0x3f80, HalfFloats.floatToBf16(1.00390625f)); // tie rounds to even
    assertEquals((short) 0x3c00, HalfFloats.floatToFp16(1f));
    assertEquals((short) 0x7bff, HalfFloats.floatToFp16(65504f));
    assertEquals((short) 0x0001, HalfFloats.floatToFp16(0x1p-24f));
    assertEquals((short) 0x7c00, HalfFloats.floatToFp16(1e6f));
    assertTrue(Float.isNaN(HalfFloats.bf16ToFloat(HalfFloats.floatToBf16(Float.NaN))));
    for (int h = 0; h < 0x7c00; h++) { // every finite positive half survives a round trip
      assertEquals((short) h, HalfFloats.floatToFp16(HalfFloats.fp16ToFloat((short) h)), "fp16 " + h);
    }
  }

  /** Every client-side error is a StatusRuntimeException (INVALID_ARGUMENT) naming the tensor. */
  static StatusRuntimeException invalid(org.junit.jupiter.api.function.Executable e) {
    StatusRuntimeException x = assertThrows(StatusRuntimeException.class, e);
    assertEquals(Status.Code.INVALID_ARGUMENT, x.getStatus().getCode(), x.getMessage());
    assertTrue(ClientErrors.isClientSide(x), "client-side errors carry the jaxport-client-error trailer");
    return x;
  }

  @Test
  void errorsAreOneTypeAndNameTheTensor() {
    String d = invalid(() -> Tensor.ofFloat32("pixels", new long[] {2, 3}, 1f)).getStatus().getDescription();
    assertTrue(d.contains("pixels") && d.contains("6 elements") && d.contains("data has 1"), d);
    d = invalid(() -> Tensor.raw("pixels", "FP32", new long[] {2, 3}, new byte[20]).validate()).getStatus().getDescription();
    assertTrue(d.contains("pixels") && d.contains("24"), d);
    d = invalid(() -> Tensor.ofFloat32("x", TWO, 1f, 2f).asInt64()).getStatus().getDescription();
    assertTrue(d.contains("'x' is FP32, not INT64"), d);
    d = invalid(() -> Tensor.ofBFloat16("x", TWO, 1f, 2f).typedContents()).getStatus().getDescription();
    assertTrue(d.contains("BF16 has no typed contents"), d);
    d = invalid(() -> Tensor.ofUint8("u", TWO, 1, 256)).getStatus().getDescription();
    assertTrue(d.contains("'u'") && d.contains("256"), d);
    d = invalid(() -> Tensor.ofUint16("u", TWO, -1, 2)).getStatus().getDescription();
    assertTrue(d.contains("'u'") && d.contains("-1"), d);
    d = invalid(() -> Tensor.ofUint32("u", TWO, 1, 1L << 32)).getStatus().getDescription();
    assertTrue(d.contains("'u'") && d.contains("4294967296"), d);
    d = invalid(() -> Tensor.itemSize("BYTES")).getStatus().getDescription();
    assertTrue(d.contains("'BYTES'"), d);
  }

  @Test
  void typedContentsRoundTrip() {
    for (Tensor t : new Tensor[] {
        Tensor.ofFloat32("a", TWO, 1f, -2.5f), Tensor.ofFloat64("a", TWO, 3, 4),
        Tensor.ofInt8("a", TWO, (byte) -1, (byte) 5), Tensor.ofInt32("a", TWO, -7, 1 << 30),
        Tensor.ofInt64("a", TWO, -7, 1L << 50), Tensor.ofUint8("a", TWO, 0, 200), Tensor.ofBool("a", TWO, true, false),
        Tensor.ofInt16("a", TWO, (short) -3, (short) 300), Tensor.ofUint16("a", TWO, 0, 65535),
        Tensor.ofUint32("a", TWO, 1, 4294967295L), Tensor.ofUint64("a", TWO, -1L, 5)}) {
      Tensor back = Tensor.fromContents("a", t.datatype(), t.shape(), t.typedContents());
      assertEquals(t.rawBytes(), back.rawBytes(), t.datatype());
    }
  }
}
