package dev.jaxport.client;

/** IEEE half and bfloat16 conversions (Java 17 has neither built in). */
public final class HalfFloats {
  private HalfFloats() {}

  /** Widen a bfloat16 bit pattern: it is the upper half of a float. */
  public static float bf16ToFloat(short bits) {
    return Float.intBitsToFloat((bits & 0xffff) << 16);
  }

  /** Narrow to bfloat16 with round-to-nearest-even; NaN stays NaN. */
  public static short floatToBf16(float f) {
    int u = Float.floatToRawIntBits(f);
    if (Float.isNaN(f)) {
      return (short) ((u >>> 16) | 0x0040);
    }
    u += 0x7fff + ((u >>> 16) & 1);
    return (short) (u >>> 16);
  }

  /** Widen an IEEE 754 half-precision bit pattern (exact). */
  public static float fp16ToFloat(short h) {
    int bits = h & 0xffff;
    int sign = (bits >>> 15) << 31;
    int exp = (bits >>> 10) & 0x1f;
    int frac = bits & 0x3ff;
    if (exp == 0x1f) {
      return Float.intBitsToFloat(sign | 0x7f800000 | (frac << 13));
    }
    if (exp == 0) {
      float v = frac * 0x1p-24f;
      return sign != 0 ? -v : v;
    }
    return Float.intBitsToFloat(sign | ((exp + 112) << 23) | (frac << 13));
  }

  /** Narrow to IEEE half with round-to-nearest-even (overflow gives infinity). */
  public static short floatToFp16(float f) {
    int u = Float.floatToRawIntBits(f);
    int sign = (u >>> 16) & 0x8000;
    int exp = (u >>> 23) & 0xff;
    int frac = u & 0x7fffff;
    if (exp == 0xff) {
      return (short) (sign | (frac != 0 ? 0x7e00 : 0x7c00));
    }
    int e = exp - 127 + 15;
    if (e >= 0x1f) {
      return (short) (sign | 0x7c00);
    }
    if (e <= 0) {
      if (e < -10) {
        return (short) sign;
      }
      int m = frac | 0x800000;
      int shift = 14 - e;
      int half = 1 << (shift - 1);
      int rest = m & ((1 << shift) - 1);
      int r = m >>> shift;
      if (rest > half || (rest == half && (r & 1) == 1)) {
        r++;
      }
      return (short) (sign | r);
    }
    int r = (e << 10) | (frac >>> 13);
    int rest = frac & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (r & 1) == 1)) {
      r++;
    }
    return (short) (sign | r);
  }
}
