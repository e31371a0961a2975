package dev.jaxport.conformance;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Minimal reader of the suite's .npy files: little-endian, C-order, fixed-size dtypes. */
final class Npy {
  private static final Pattern DESCR = Pattern.compile("'descr':\\s*'([^']+)'");
  private static final Pattern FORTRAN = Pattern.compile("'fortran_order':\\s*(True|False)");
  private static final Pattern SHAPE = Pattern.compile("'shape':\\s*\\(([^)]*)\\)");
  private static final Map<String, Integer> SIZES =
      Map.ofEntries(
          Map.entry("|b1", 1), Map.entry("|u1", 1), Map.entry("|i1", 1), Map.entry("<u2", 2),
          Map.entry("<i2", 2), Map.entry("<f2", 2), Map.entry("<u4", 4), Map.entry("<i4", 4),
          Map.entry("<f4", 4), Map.entry("<u8", 8), Map.entry("<i8", 8), Map.entry("<f8", 8));

  private Npy() {}

  /** The element bytes of the file (BF16 is stored as its <u2 bit patterns). */
  static byte[] readData(Path path) throws IOException {
    byte[] raw = Files.readAllBytes(path);
    if (raw.length < 10 || raw[0] != (byte) 0x93 || !new String(raw, 1, 5, StandardCharsets.US_ASCII).equals("NUMPY")) {
      throw new IOException(path + ": not a .npy file");
    }
    ByteBuffer b = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
    int major = raw[6];
    int headerLen;
    int start;
    if (major == 1) {
      headerLen = b.getShort(8) & 0xffff;
      start = 10;
    } else if (major == 2 || major == 3) {
      headerLen = b.getInt(8);
      start = 12;
    } else {
      throw new IOException(path + ": unsupported .npy version " + major);
    }
    String header = new String(raw, start, headerLen, StandardCharsets.ISO_8859_1);
    Matcher d = DESCR.matcher(header);
    Matcher f = FORTRAN.matcher(header);
    Matcher s = SHAPE.matcher(header);
    if (!d.find() || !f.find() || !s.find()) {
      throw new IOException(path + ": unreadable header " + header);
    }
    if (f.group(1).equals("True")) {
      throw new IOException(path + ": Fortran-order arrays are not supported");
    }
    Integer size = SIZES.get(d.group(1));
    if (size == null) {
      throw new IOException(path + ": unsupported dtype " + d.group(1));
    }
    long count = 1;
    for (String part : s.group(1).split(",")) {
      if (!part.isBlank()) {
        count *= Long.parseLong(part.trim());
      }
    }
    byte[] data = Arrays.copyOfRange(raw, start + headerLen, raw.length);
    if (data.length != count * size) {
      throw new IOException(path + ": " + data.length + " data bytes, header needs " + count * size);
    }
    return data;
  }
}
