/* quant.cuh: the weight-only quantization rule (i8, i4 with groups) and the packed layout the
 * GPU streams, written once. C11 and CUDA C++, like opmath.cuh: the CPU reference
 * (ir/interp.c) quantizes with these functions, the load-time kernels of prep.cuh pack with
 * them, and gemm_wq.cuh decodes what they pack. The rule itself is the contract at the top of
 * ir/interp.c; the layout is the GPU's alone:
 *
 *   B is the GEMM's [R, K] operand (R = S*N merged output columns, K the shared dim).
 *   scales  f32 [R, ngroups]: ngroups = 1 for i8; ceil(K / G) for i4 (G = 0 or G > K: 1)
 *   codes   u8, 512-byte tiles of 16 rows x WQ_TILE_K(bits) k (64 for i4, 32 for i8), in the
 *           order of wq_tile_index: groups of WQ_RB_GROUP = 8 row blocks (128 rows, a decode
 *           CTA's), and within a group k tile by k tile, the group's 8 row blocks side by side:
 *           tile (row block rb, k tile kt) at ((rb / 8 * wq_tiles_k(K) + kt) * 8 + rb % 8) * 512.
 *           A CTA streaming its 128 rows along K reads one run of consecutive memory (a warp's
 *           next tile of its row block is 8 tiles on). Streaming the 8 row blocks as 8 runs 64 KB
 *           apart instead (each block's tiles consecutive) streamed 14% slower with no product
 *           (H100, 70B i4 sublayer at one token: 152.7 against 131.9 us); with the product the
 *           decode kernels gain 1-2% (kernels/NOTES.md, nineteenth session). Rows
 *           past R (to a multiple of 128) and k past K hold level 0. As a tensor:
 *           [wq_code_rows(R), wq_row_bytes(K, bits)].
 *             i8: code = q + 128, a byte;  i4: code = q + 8, a nibble
 *   Inside a tile, lane l of a warp loads the 16 bytes at l * 16: the mma.sync m16n8k16 A
 *   fragments (kernels/common.cuh: mma_16816, the weights as A) of the tile's k16 steps for
 *   lane l, for the 16 rows. wq_tile_elem says which (row, k) each code of them is. Within each
 *   32-k block, k is permuted so that a lane's activations (the B fragments) are the 8
 *   consecutive k = 8t .. 8t+7 of the block (t = l % 4): one 16-byte load for two k16 steps.
 *   The offset codes let the kernel build a 16-bit float from a code with one mask or byte
 *   permute and one fused multiply-add (the level is exact in bf16 and f16).
 *
 * It includes nothing: <math.h> (C) or the CUDA math library must be visible.
 */
#ifndef FFN_KERNELS_QUANT_H
#define FFN_KERNELS_QUANT_H

#ifdef __CUDACC__
#define WQ_UNROLL _Pragma("unroll")
#define WQ_FN static __device__ __forceinline__
#define WQ_CFN static constexpr __host__ __device__ int /* usable in template arguments */
#else
#define WQ_UNROLL
#define WQ_FN static inline
#define WQ_CFN static inline int
#endif

/* k per 512-byte tile of 16 rows */
#define WQ_TILE_K(bits) ((bits) == 8 ? 32 : 64)

/* the group length actually used: G = 0 (or one longer than K) means one group over K */
WQ_FN long long wq_group_len(long long K, long long G) { return G <= 0 || G > K ? (K > 0 ? K : 1) : G; }
WQ_FN long long wq_ngroups(long long K, long long G) {
  long long g = wq_group_len(K, G);
  return K > 0 ? (K + g - 1) / g : 1;
}
/* the codes as a tensor [wq_code_rows(R), wq_row_bytes(K, bits)]: R and K rounded up to whole tiles */
WQ_FN long long wq_tiles_k(long long K, int bits) { return (K + WQ_TILE_K(bits) - 1) / WQ_TILE_K(bits); }
#define WQ_RB_GROUP 8 /* row blocks of 16 side by side in the codes' tile order */
WQ_FN long long wq_code_rows(long long R) { return (R + 16 * WQ_RB_GROUP - 1) / (16 * WQ_RB_GROUP) * (16 * WQ_RB_GROUP); }
WQ_FN long long wq_row_bytes(long long K, int bits) { return wq_tiles_k(K, bits) * 32; }
/* the place of tile (row block rb, k tile kt) among the codes' tiles (tk = wq_tiles_k), and back */
WQ_FN long long wq_tile_index(long long rb, long long kt, long long tk) {
  return (rb / WQ_RB_GROUP * tk + kt) * WQ_RB_GROUP + rb % WQ_RB_GROUP;
}
WQ_FN void wq_tile_place(long long tile, long long tk, long long *rb, long long *kt) {
  const long long grp = tile / (WQ_RB_GROUP * tk), in = tile % (WQ_RB_GROUP * tk);
  *kt = in / WQ_RB_GROUP, *rb = grp * WQ_RB_GROUP + in % WQ_RB_GROUP;
}

/* Code e of lane's 16 bytes in a tile (i4: e = 0..31, nibble e % 2 of byte e / 2, low first;
 * i8: e = 0..15, byte e): its row (0..15) and k (0..WQ_TILE_K - 1) in the tile. The lane's
 * 32-bit word j holds step j's fragment registers a[0..3] (i4: nibbles i and i + 4 are the low
 * and high halves of a[i]) or half of it (i8: word 2s holds a[0], a[1] of step s, bytes 0, 1
 * and 2, 3; word 2s + 1 holds a[2], a[3]). Register r half h is row g + 8 (r & 1), slot
 * 2t + 8 (r >> 1) + h of the step (g = lane / 4, t = lane % 4); slot 2t + 8c + h of step s
 * of a 32-k block is k = 8t + 4s + 2c + h of that block. */
WQ_FN void wq_tile_elem(int bits, int lane, int e, int *row, int *k) {
  int word, reg, half, block, step;
  if (bits == 4) {
    word = e / 8, reg = e % 4, half = (e % 8) / 4;
    block = word / 2, step = word % 2;
  } else {
    word = e / 4, reg = 2 * (word % 2) + (e % 4) / 2, half = e % 2;
    block = 0, step = word / 2;
  }
  const int g = lane / 4, t = lane % 4;
  *row = g + 8 * (reg & 1);
  *k = 32 * block + 8 * t + 4 * step + 2 * (reg >> 1) + half;
}

/* Bits as an f32; two f32 as a bf16 pair rounded to nearest even (lo in the low half; finite
 * values); byte `b` of w under 0x4B0000 (the f32 2^23 + byte); x's low nibble under it. One
 * instruction each on the GPU. */
#ifdef __CUDACC__
WQ_FN float wq_as_f32(unsigned u) { return __uint_as_float(u); }
WQ_FN unsigned wq_bf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
WQ_FN unsigned wq_byte_f32(unsigned w, int b) { return __byte_perm(w, 0x4b00u, 0x5440u | (unsigned)b); }
WQ_FN unsigned wq_nib_f32(unsigned x) { // (x & 0xf) | 0x4B000000 in one lop3: the magic in a register
  unsigned r;
  asm("lop3.b32 %0, %1, 15, %2, 0xEA;" : "=r"(r) : "r"(x), "r"(0x4b000000u));
  return r;
}
#else
WQ_FN float wq_as_f32(unsigned u) {
  union { unsigned u; float f; } c = {u};
  return c.f;
}
WQ_FN unsigned wq_bf16_rne(float f) {
  union { float f; unsigned u; } c = {f};
  return (c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16;
}
WQ_FN unsigned wq_bf16x2(float lo, float hi) { return wq_bf16_rne(lo) | wq_bf16_rne(hi) << 16; }
WQ_FN unsigned wq_byte_f32(unsigned w, int b) { return ((w >> (8 * b)) & 0xffu) | 0x4b000000u; }
WQ_FN unsigned wq_nib_f32(unsigned x) { return (x & 0xfu) | 0x4b000000u; }
#endif

/* The GPU's decoding of one 32-k block of a lane's codes in a tile (the layout above) to bf16,
 * shared by ffn_wq_dequant (kernels/runtime.cuh), the mixed-input GEMM (gemm_sm90.cuh: WQ) and
 * their host mirrors (tests/interp/wq_pack_test.c): v[h][p] holds row g + 8h, k = 8t + 2p and
 * 8t + 2p + 1 of the block as a bf16 pair, each bf16(level * s[h]) rounded once to nearest even
 * from the f32 product (the contract at the top of ir/interp.c). w: i4 the block's two words
 * (steps 0 and 1: pair p is nibbles h + 2 (p % 2) and that + 4 of word p / 2), i8 the tile's
 * four (pair p: bytes 2h and 2h + 1 of word p). The level is made exactly in f32 from bits, 2^23
 * + code as the float 0x4B000000 | code less 2^23 and the code offset: no integer conversion
 * (a quarter-rate instruction). bits is a constant where the GPU code calls it. */
WQ_FN void wq_block_bf16(int bits, const unsigned *w, const float s[2], unsigned v[2][4]) {
  const float off = 8388608.f + (bits == 8 ? 128.f : 8.f);
  WQ_UNROLL for (int h = 0; h < 2; h++)
    WQ_UNROLL for (int p = 0; p < 4; p++) {
      unsigned lo, hi;
      if (bits == 4) {
        const unsigned x = w[p / 2] >> (4 * (h + 2 * (p % 2)));
        lo = wq_nib_f32(x), hi = wq_nib_f32(x >> 16);
      } else {
        lo = wq_byte_f32(w[p], 2 * h), hi = wq_byte_f32(w[p], 2 * h + 1);
      }
      v[h][p] = wq_bf16x2((wq_as_f32(lo) - off) * s[h], (wq_as_f32(hi) - off) * s[h]);
    }
}

/* The mixed-input producer's placement (gemm_sm90.cuh: sm90_wq_half): the block of the tile that a
 * lane takes as its logical block b (lanes of odd g = lane / 4 swap the two, so that each quarter
 * warp's 16-byte stores meet 8 distinct chunk positions), and the byte offset of row rl's
 * 16-byte chunk c (k 8c .. 8c + 7 of the step) in a B tile of 64 k in the 128B swizzle. */
WQ_FN int wqmx_block(int lane, int b) { return b ^ ((lane >> 2) & 1); }
WQ_FN int wqmx_sw128(int rl, int c) { return rl * 128 + ((c ^ (rl & 7)) << 4); }

/* The scale of a group whose largest magnitude is amax (a double, as the reference keeps it). */
WQ_FN float wq_scale(double amax, int qmax) { return amax > 0 ? (float)(amax / qmax) : 1.0f; }

/* The integer level of x under scale s: round to nearest even, clamped to [-qmax, qmax];
 * NaN gives 0 (as round_to_dtype's integer rule). The division is in double. */
WQ_FN int wq_level(double x, float s, int qmax) {
  double q = x / (double)s;
  if (q != q)
    return 0;
  q = rint(q);
  return q < -qmax ? -qmax : q > qmax ? qmax : (int)q;
}

/* the stored code of level q, and back */
WQ_FN unsigned wq_code(int q, int bits) { return (unsigned)(q + (bits == 8 ? 128 : 8)); }
WQ_FN int wq_code_level(unsigned code, int bits) { return (int)code - (bits == 8 ? 128 : 8); }

/* gemm_wq.cuh's shared memory, bytes, for a CTA of bm tokens x bn rows of B (bn / 16 warps),
 * tiles of bk k, a ring of stages of tps consecutive k tiles and activations of elem bytes: per
 * tile each warp's codes (512 bytes), for i4 its rows' scales for the tile's two 32-k blocks
 * (128 bytes), and the CTA's activations (bm x bk). The ring has the configuration's `stages`
 * stages, fewer where they would pass WQ_MAX_RING (f32 activations at 64 tokens). After the
 * main loop the CTA's sums (bm x bn f32) reuse the ring; then the row statistics,
 * 2 x (warps + 1) x bm floats. kernels/gemm_host.h sizes the launch with wq_smem_bytes, the
 * kernel lays its memory out with the parts. Constant expressions in CUDA (template arguments). */
#define WQ_MAX_RING (160 * 1024)
WQ_CFN wq_stage_bytes(int bm, int bn, int bk, int tps, int elem) {
  return tps * (bn / 16 * (512 + (bk == 64 ? 128 : 0)) + bm * bk * elem);
}
WQ_CFN wq_stages(int bm, int bn, int bk, int tps, int stages, int elem) {
  return stages * wq_stage_bytes(bm, bn, bk, tps, elem) <= WQ_MAX_RING ? stages
                                                                        : WQ_MAX_RING / wq_stage_bytes(bm, bn, bk, tps, elem);
}
WQ_CFN wq_ring_bytes(int bm, int bn, int bk, int tps, int stages, int elem) {
  return wq_stages(bm, bn, bk, tps, stages, elem) * wq_stage_bytes(bm, bn, bk, tps, elem) > 4 * bm * bn
             ? wq_stages(bm, bn, bk, tps, stages, elem) * wq_stage_bytes(bm, bn, bk, tps, elem)
             : 4 * bm * bn;
}
WQ_CFN wq_smem_bytes(int bm, int bn, int bk, int tps, int stages, int elem) {
  return wq_ring_bytes(bm, bn, bk, tps, stages, elem) + 8 * bm * (bn / 16 + 1);
}

/* gemm_sm90's mixed-input form (WQ bits: the weights' codes converted to bf16 in shared memory,
 * gemm_sm90.cuh: sm90_wq_producer): a ring of slots beside the stage ring, each a 64-k step of the
 * tile's bn rows: its codes, bn / 16 row blocks x 64 / WQ_TILE_K(bits) tiles of 512 bytes
 * (wqmx_code_bytes), then the rows' scales for the step's two 32-k blocks, f32 [bn][2]. The ring
 * takes as many slots as fit in the `avail` bytes the tile leaves, at most WQMX_MAX_CODE_STAGES:
 * each slot is a k-tile of codes in flight, and their copies' latency (L2 or DRAM) is several
 * k-tiles of the producer's work (kernels/NOTES.md, thirty-second session). Fewer than 2: no
 * mixed-input form of that tile. */
#define WQMX_MAX_CODE_STAGES 8
WQ_CFN wqmx_code_bytes(int bn, int bits) { return bn / 16 * (64 / WQ_TILE_K(bits)) * 512; }
WQ_CFN wqmx_stage_bytes(int bn, int bits) { return wqmx_code_bytes(bn, bits) + 8 * bn; }
WQ_CFN wqmx_code_stages(int bn, int bits, int avail) {
  return avail / wqmx_stage_bytes(bn, bits) < WQMX_MAX_CODE_STAGES ? avail / wqmx_stage_bytes(bn, bits)
                                                                    : WQMX_MAX_CODE_STAGES;
}

/* gemm_wqrs.cuh's shared memory (the codes as wgmma's register operand): `stages` stages of the
 * activations' k-tile (bm tokens x 64 k of bf16, 128 bytes a row) and the codes of one group of
 * WQ_RB_GROUP row blocks (4 KB), then two barriers a stage, the split-K flag, the row statistics
 * [2][bm] and the 1024-byte realignment. The epilogue's f32 tile [bm][132] reuses the stages. */
WQ_CFN wqrs_stage_bytes(int bm) { return bm * 128 + WQ_RB_GROUP * 512; }
WQ_CFN wqrs_smem_bytes(int bm, int stages) { return stages * wqrs_stage_bytes(bm) + 16 * stages + 16 + 8 * bm + 1024; }

/* gemm_wqd.cuh's shared memory, bytes, for bm tokens x bn rows of B, k tiles of bk, chunks of
 * ct tiles of activations and rings of depth slots: two buffers of a chunk's activations (bm x
 * ct*bk of elem bytes), then each warp's ring, a slot holding two tiles' codes (32 lanes x 16
 * bytes each) and for i4 two scales per lane (row lane % 16, blocks lane / 16 and 2 + lane /
 * 16 of the step); after the main loop the
 * CTA's sums (bm x bn f32) and the warps' row statistics (2 x warps x bm) take their place;
 * then the row statistics, 2 x bm floats. */
WQ_CFN wqd_slot_bytes(int bk) { return 2 * (bk == 64 ? 512 + 128 : 512); } /* two tiles */
WQ_CFN wqd_smem_bytes(int bm, int bn, int bk, int ct, int depth, int elem) {
  return (2 * ct * bk * bm * elem + bn / 16 * depth * wqd_slot_bytes(bk) > 4 * bm * bn + 8 * bn / 16 * bm
              ? 2 * ct * bk * bm * elem + bn / 16 * depth * wqd_slot_bytes(bk)
              : 4 * bm * bn + 8 * bn / 16 * bm) +
         8 * bm;
}

/* gemm_wqdl.cuh's shared memory, bytes, for codes of `bits`, bm tokens x bn rows of B, chunks of
 * ct tiles of activations and rings of depth slots: two buffers of a chunk's activations (bm x
 * ct * WQ_TILE_K(bits) of elem bytes), each warp's ring, a slot holding a step of four tiles'
 * codes (4 x 512 bytes) and for i4 up to 64 scales (16 rows x up to 4 units of >= 64 k), and for
 * i4 two buffers of the chunk's activation sums per (unit, token), [ct][bm / 2][4] floats at most
 * (i8 has neither: its per-row scales are applied after the loop); after the main loop the CTA's
 * sums (bm x bn f32) and the statistics' partials (2 floats per warp's 32 pieces of 8
 * activations: 2 x bm x ct x WQ_TILE_K / 256 floats); then the row statistics, 2 x bm floats. At
 * least what gemm_wqd takes with its own configuration's chunks (8 tiles for i4, 16 for i8) and
 * rings of 4, which runs in its place for f32 activations and i4 group lengths it does not take
 * (elem 4: only that). */
#define WQDL_SLOT_BYTES (4 * 512 + 64 * 4) /* i4 */
WQ_CFN wqdl_slot_bytes(int bits) { return bits == 8 ? 4 * 512 : WQDL_SLOT_BYTES; }
WQ_CFN wqdl_smem_bytes(int bits, int bm, int bn, int ct, int depth, int elem) {
  const int bk = WQ_TILE_K(bits);
  const int loop = 2 * ct * bk * bm * elem + bn / 16 * depth * wqdl_slot_bytes(bits) + (bits == 4 ? 16 * ct * bm : 0);
  const int end = 4 * bm * bn + bm * ct * bk / 32, lean = (loop > end ? loop : end) + 8 * bm;
  const int wqd = wqd_smem_bytes(bm, bn, bk, bits == 4 ? 8 : 16, 4, elem);
  return elem == 4 || wqd > lean ? wqd : lean;
}

#endif /* FFN_KERNELS_QUANT_H */
