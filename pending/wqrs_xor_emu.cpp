#include <cstdio>
#include <cstdint>
#include <cstdlib>
typedef uint32_t u32;
static u32 byte_perm(u32 a, u32 b, u32 s) { // CUDA __byte_perm semantics (default mode)
  uint64_t x = (uint64_t)b << 32 | a; u32 r = 0;
  for (int i = 0; i < 4; ++i) { u32 sel = (s >> (4 * i)) & 7; r |= (u32)((x >> (8 * sel)) & 0xff) << (8 * i); }
  return r;
}
static u32 conv(u32 x) { return x & 0x000f000fu; } // the levels' nibbles: all the conversion reads
int main() {
  srand(7);
  for (int trial = 0; trial < 1000; ++trial) {
    u32 W[32][4]; for (int l = 0; l < 32; ++l) for (int i = 0; i < 4; ++i) W[l][i] = (u32)rand() ^ ((u32)rand() << 16);
    u32 Fo[32][16], Fn[32][16];
    for (int l = 0; l < 32; ++l) { // old: shuffles from quad + 2 sg + c
      int t = l & 3, quad = l & ~3; u32 sh = 8u * (t & 1); bool hi = t >= 2;
      for (int b = 0; b < 2; ++b) for (int sg = 0; sg < 2; ++sg) for (int c = 0; c < 2; ++c) {
        int src = quad + 2 * sg + c; u32 x = hi ? W[src][2 * b + 1] : W[src][2 * b];
        Fo[l][4 * (2 * b + sg) + 2 * c] = conv(x >> sh); Fo[l][4 * (2 * b + sg) + 2 * c + 1] = conv(x >> (sh + 4));
      }
    }
    for (int b = 0; b < 2; ++b) {
      u32 mine[32], away[32], r[32], pk[32], q[32], own[32];
      struct S { u32 po, pout, pick[4]; bool hi; } sel[32];
      for (int l = 0; l < 32; ++l) {
        u32 t = l & 3, e = t & 1; S &s = sel[l]; s.hi = t >= 2;
        s.po = e | (4u + e) << 4 | (2u + e) << 8 | (6u + e) << 12;
        s.pout = (e ^ 1u) | (5u - e) << 4 | (3u - e) << 8 | (7u - e) << 12;
        for (u32 L = 0; L < 4; ++L) { u32 rel = L ^ t, b0 = 4u * (rel & 1u) + (rel >> 1); s.pick[L] = b0 | b0 << 4 | (b0 + 2u) << 8 | (b0 + 2u) << 12; }
        mine[l] = s.hi ? W[l][2 * b + 1] : W[l][2 * b]; away[l] = s.hi ? W[l][2 * b] : W[l][2 * b + 1];
      }
      for (int l = 0; l < 32; ++l) r[l] = away[l ^ 2];
      for (int l = 0; l < 32; ++l) pk[l] = byte_perm(mine[l], r[l], sel[l].pout);
      for (int l = 0; l < 32; ++l) { q[l] = pk[l ^ 1]; own[l] = byte_perm(mine[l], r[l], sel[l].po); }
      for (int l = 0; l < 32; ++l) for (int L = 0; L < 4; ++L) {
        u32 x = byte_perm(own[l], q[l], sel[l].pick[L]);
        Fn[l][4 * (2 * b + L / 2) + 2 * (L % 2)] = conv(x); Fn[l][4 * (2 * b + L / 2) + 2 * (L % 2) + 1] = conv(x >> 4);
      }
    }
    for (int l = 0; l < 32; ++l) for (int i = 0; i < 16; ++i) if (Fo[l][i] != Fn[l][i]) { printf("differ trial %d lane %d F%d: %08x %08x\n", trial, l, i, Fo[l][i], Fn[l][i]); return 1; }
  }
  printf("old and new fragments agree: 1000 random tiles x 32 lanes x 16 registers\n");
  return 0;
}
