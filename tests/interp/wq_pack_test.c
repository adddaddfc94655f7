/* wq_pack_test.c: the GPU's load-time weight quantization (kernels/prep.cuh: ffn_prep_wq_scale,
 * ffn_prep_wq_pack; decoded by gemm_wq.cuh) gives exactly the weights the CPU reference
 * multiplies by under `precision weights i8|i4` (ir/interp.c's contract).
 *
 * The prep kernels' loops are mirrored here on the host over kernels/quant.cuh, the functions
 * they call; the codes are decoded as gemm_wq does, and for i8 with bf16 also as gemm_wqdl does
 * (wqdl_frag8): its 32-bit words, its bit tricks (masks, lop3, byte permutes and the magic
 * exponents of bf16 / f16 / f32, emulated here), the mma.sync
 * fragment layout and the k permutation of the activations, times the scale in f32. The reference's
 * quantized weights are read back through a product with the identity, y = I @ b (one nonzero
 * term per output, exact in f32). Random matrices with all-zero columns, single outliers and,
 * for i4, a last group shorter than the others; bit-exact comparison. The prefill path's
 * dequantization to bf16 (kernels/runtime.cuh: ffn_wq_dequant) is mirrored too, against the
 * reference's weights rounded to bf16.
 */
#include "util.h"

#include <math.h>
#include <time.h>

#include "kernels/quant.cuh"

/* ffn_prep_wq_scale and ffn_prep_wq_pack on b_nk [R, K] (B's rows: the GEMM's output columns). */
static void host_pack(const float *bnk, int64_t R, int64_t K, int bits, int64_t group, float *scales,
                      unsigned char *codes) {
  const int64_t G = bits == 8 ? wq_group_len(K, 0) : wq_group_len(K, group), ng = (K + G - 1) / G;
  const int qmax = bits == 8 ? 127 : 7, per = bits == 8 ? 1 : 2;
  const int64_t tk = wq_tiles_k(K, bits), n = wq_code_rows(R) * wq_row_bytes(K, bits);
  for (int64_t w = 0; w < R * ng; w++) {
    int64_t r = w / ng, k0 = (w % ng) * G, k1 = k0 + G < K ? k0 + G : K;
    double amax = 0;
    for (int64_t k = k0; k < k1; k++)
      amax = fmax(amax, fabs((double)bnk[r * K + k]));
    scales[w] = wq_scale(amax, qmax);
  }
  for (int64_t i = 0; i < n; i++) {
    long long rb, kt;
    wq_tile_place(i / 512, tk, &rb, &kt);
    int lane = (int)(i % 512) / 16, b = (int)(i % 16);
    unsigned byte = 0;
    for (int h = 0; h < per; h++) {
      int row, kk;
      wq_tile_elem(bits, lane, b * per + h, &row, &kk);
      int64_t r = rb * 16 + row, k = kt * WQ_TILE_K(bits) + kk;
      int q = r < R && k < K ? wq_level(bnk[r * K + k], scales[r * ng + k / G], qmax) : 0;
      byte |= wq_code(q, bits) << (4 * h);
    }
    codes[i] = (unsigned char)byte;
  }
}

/* PTX prmt (__byte_perm): byte i of the result is byte (s >> 4i) & 7 of {y, x} */
static uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  uint64_t v = (uint64_t)y << 32 | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; i++)
    r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
static float f32_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bf16_val(uint32_t h) { return f32_of((h & 0xffff) << 16); }
static float f16_val(uint32_t h) { /* normal numbers only: the decode never makes others */
  int e = (h >> 10) & 31, m = h & 1023;
  float v = ldexpf((float)(m | 1024), e - 25);
  return h & 0x8000 ? -v : v;
}
/* fma.rn.{bf16,f16}x2 on exact small integers: a * b + c per half, as floats */
static void fma2(int f16, uint32_t a, uint32_t b, uint32_t c, float out[2]) {
  for (int h = 0; h < 2; h++) {
    uint32_t x = a >> (16 * h), y = b >> (16 * h), z = c >> (16 * h);
    out[h] = f16 ? f16_val(x) * f16_val(y) + f16_val(z) : bf16_val(x) * bf16_val(y) + bf16_val(z);
  }
}

/* gemm_wq's decode of one step's A fragment from the lane's words (wq_frag_i4 / wq_frag_i8;
 * lean: i8 bf16 as gemm_wqdl's wqdl_frag8): level[reg][half] */
static void frag(int bits, int f16, int lean, const uint32_t *w, int step, float level[4][2]) {
  for (int i = 0; i < 4; i++) {
    if (bits == 4) {
      uint32_t base = f16 ? 0x64006400u : 0x43004300u, one = f16 ? 0x3c003c00u : 0x3f803f80u,
               off = f16 ? 0xe408e408u : 0xc308c308u;
      fma2(f16, ((w[step] >> (4 * i)) & 0x000f000fu) | base, one, off, level[i]);
    } else if (lean && !f16) { /* the code under 0x43, its top bit cleared, plus -256 or -128 */
      uint32_t v = byte_perm(w[2 * step + i / 2], 0x43434343u, i % 2 ? 0x4342u : 0x4140u);
      fma2(0, v & 0xff7fff7fu, 0x3f803f80u, (v & 0x00800080u) ^ 0xc380c380u, level[i]);
    } else if (f16) {
      fma2(1, byte_perm(w[2 * step + i / 2], 0x64646464u, i % 2 ? 0x4342u : 0x4140u), 0x3c003c00u, 0xe480e480u,
           level[i]);
    } else {
      uint32_t x = w[2 * step + i / 2], p = 2 * (i % 2);
      float lo = f32_of(byte_perm(x, 0x4bu, 0x4550u | p)) - 8388736.0f,
            hi = f32_of(byte_perm(x, 0x4bu, 0x4550u | (p + 1))) - 8388736.0f;
      uint32_t a = byte_perm(bits_of(lo), bits_of(hi), 0x7632u);
      level[i][0] = bf16_val(a), level[i][1] = bf16_val(a >> 16);
    }
  }
}

/* Every weight as gemm_wq sees it: walk the tiles lane by lane, decode the lane's words step by
 * step, and place each fragment element by the mma.sync layout (register r half h: row
 * g + 8 (r & 1), slot 2t + 8 (r >> 1) + h) and the activations' k order (a lane's B fragments of
 * steps 0 and 1 of a 32-k block are k = 8t + 0..3 and 8t + 4..7). out [R, K]: level times scale. */
static void decode_all(const unsigned char *codes, const float *scales, int64_t R, int64_t K, int bits, int64_t group,
                       int f16, int lean, float *out, int64_t *pad_bad) {
  const int64_t G = bits == 8 ? K : wq_group_len(K, group), ng = (K + G - 1) / G, tk = wq_tiles_k(K, bits);
  const int steps = bits == 4 ? 4 : 2;
  for (int64_t tile = 0; tile < wq_code_rows(R) / 16 * tk; tile++)
    for (int lane = 0; lane < 32; lane++) {
      uint32_t w[4];
      memcpy(w, codes + tile * 512 + lane * 16, 16);
      for (int step = 0; step < steps; step++) {
        float level[4][2];
        frag(bits, f16, lean, w, step, level);
        for (int r = 0; r < 4; r++)
          for (int h = 0; h < 2; h++) {
            long long rb, kt;
            wq_tile_place(tile, tk, &rb, &kt);
            int64_t row = rb * 16 + lane / 4 + 8 * (r & 1);
            int64_t k = kt * WQ_TILE_K(bits) + 32 * (step / 2) + 8 * (lane % 4) + 4 * (step % 2) + 2 * (r >> 1) + h;
            if (row >= R || k >= K)
              *pad_bad += level[r][h] != 0;
            else
              out[row * K + k] = level[r][h] * scales[row * ng + k / G];
          }
      }
    }
}

/* Every byte through each i8 decode, in every position of a word: level c - 128, also for code 0
 * (level -128), which no packed weight has but the tiles past K that gemm_wqdl's copies fill with
 * zeros do (times zero activations) */
static void check_i8_bytes(void) {
  int bad = 0;
  for (int mode = 0; mode < 3; mode++)
    for (uint32_t c = 0; c < 256; c++) {
      uint32_t w[4];
      for (int i = 0; i < 4; i++)
        w[i] = (c << (8 * i)) | (((c + 37 * (i + 1)) & 0xff) << (8 * ((i + 1) % 4)));
      for (int step = 0; step < 2; step++) {
        float level[4][2];
        frag(8, mode == 1, mode == 2, w, step, level);
        for (int r = 0; r < 4; r++) /* byte b of word j: register 2 (j % 2) + b / 2, half b % 2 */
          for (int h = 0; h < 2; h++) {
            const int j = 2 * step + r / 2, b = 2 * (r % 2) + h;
            const int code = (int)((w[j] >> (8 * b)) & 0xff);
            if (level[r][h] != (float)(code - 128) && bad++ < 3)
              fprintf(stderr, "i8 decode mode %d: code %d gives %g\n", mode, code, level[r][h]);
          }
      }
    }
  CHECK(bad == 0, "i8 decode: %d codes wrong", bad);
}

static double uniform(void) { return (double)rand() / RAND_MAX * 2 - 1; }

/* f32 -> bf16 bits, round to nearest even (cvt.rn.bf16.f32 on finite values) */
static uint16_t bf16_rne(float f) {
  uint32_t u = bits_of(f);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ffn_wq_dequant (kernels/runtime.cuh, prefill: the weights as bf16 [R, K], K % 8 == 0) mirrored:
 * each lane's 16 bytes of a tile placed by lane 0's wq_tile_elem plus the lane's offsets (g rows,
 * 8t k), a code's k + 1 neighbour at e + 4 (i4) or e + 1 (i8), one scale per (row, 32-k block),
 * 16-byte chunks of 8 consecutive k. out gets every weight once; *twice counts weights written
 * more than once or never. */
static void dequant_all(const unsigned char *codes, const float *scales, int64_t R, int64_t K, int bits, int64_t group,
                        uint16_t *out, int64_t *twice) {
  const int TK = WQ_TILE_K(bits), NB = TK / 32, NC = bits == 8 ? 16 : 32, up = bits == 8 ? 1 : 4;
  const long long tk = wq_tiles_k(K, bits), G = wq_group_len(K, bits == 8 ? 0 : group), ng = wq_ngroups(K, G);
  unsigned char *seen = calloc((size_t)(R * K), 1);
  for (long long i = 0; i < wq_code_rows(R) / 16 * tk; i++) {
    long long rb, kt;
    wq_tile_place(i, tk, &rb, &kt);
    if (rb * 16 >= R)
      continue;
    for (int lane = 0; lane < 32; lane++) {
      uint32_t words[4];
      memcpy(words, codes + i * 512 + lane * 16, 16); /* little-endian, as the GPU */
      const long long r0 = rb * 16 + lane / 4, k0 = kt * TK + 8 * (lane % 4);
      float sc[2][2];
      for (int h = 0; h < 2; h++)
        for (int b = 0; b < NB; b++)
          sc[h][b] = r0 + 8 * h < R && k0 + 32 * b < K ? scales[(r0 + 8 * h) * ng + (k0 + 32 * b) / G] : 0.f;
      uint16_t v[2][2][8];
      for (int e = 0; e < NC; e++) {
        if (e % (2 * up) >= up)
          continue;
        int row, kk, f = e + up;
        wq_tile_elem(bits, 0, e, &row, &kk);
        unsigned lo = bits == 8 ? (words[e / 4] >> (8 * (e % 4))) & 0xffu : (words[e / 8] >> (4 * (e % 8))) & 0xfu;
        unsigned hi = bits == 8 ? (words[f / 4] >> (8 * (f % 4))) & 0xffu : (words[f / 8] >> (4 * (f % 8))) & 0xfu;
        float s = sc[row / 8][kk / 32];
        v[row / 8][kk / 32][kk % 32] = bf16_rne((float)wq_code_level(lo, bits) * s);
        v[row / 8][kk / 32][kk % 32 + 1] = bf16_rne((float)wq_code_level(hi, bits) * s);
      }
      for (int h = 0; h < 2; h++)
        for (int b = 0; b < NB; b++)
          if (r0 + 8 * h < R && k0 + 32 * b < K)
            for (int j = 0; j < 8; j++) {
              int64_t at = (r0 + 8 * h) * K + k0 + 32 * b + j;
              *twice += seen[at]++ != 0;
              out[at] = v[h][b][j];
            }
    }
  }
  for (int64_t at = 0; at < R * K; at++)
    *twice += seen[at] == 0;
  free(seen);
}

/* The mixed-input GEMM's producer (kernels/gemm_sm90.cuh: sm90_wq_issue, sm90_wq_half; WQ) mirrored
 * for tiles of bn rows of B, with the kernel's own decoding and placement (quant.cuh:
 * wq_block_bf16, wqmx_block, wqmx_sw128): each 64-k step's B tile as its shared memory would
 * hold it, from a slot of codes that starts with stale bytes (what an earlier step left where no
 * copy lands: rows past the codes' 128-row blocks, k tiles past K), read back through the 128B
 * swizzle into out [R, K]. *bad counts weights written twice or never, and weights past R or K
 * that are not zero; *conflicts the quarter warps whose 16-byte stores meet a chunk position
 * twice (a shared-memory bank conflict). */
static void mixed_all(const unsigned char *codes, const float *scales, int64_t R, int64_t K, int bits, int64_t group,
                      int bn, uint16_t *out, int64_t *bad, int64_t *conflicts) {
  const int TPK = 64 / WQ_TILE_K(bits), RB = bn / 16;
  const long long tk = wq_tiles_k(K, bits), G = wq_group_len(K, bits == 8 ? 0 : group), ng = wq_ngroups(K, G);
  const long long crows = wq_code_rows(R);
  unsigned char *slot = malloc((size_t)RB * TPK * 512), *tile = malloc((size_t)bn * 128), *seen = calloc((size_t)(R * K), 1);
  for (int64_t n0 = 0; n0 < R; n0 += bn)
    for (int64_t kt = 0; kt * 64 < K; kt++) {
      for (int i = 0; i < RB * TPK * 512; i++) /* stale */
        slot[i] = (unsigned char)rand();
      for (int c = 0; c < RB * TPK; c++) { /* sm90_wq_issue */
        long long u = c / TPK, kq = kt * TPK + c % TPK, rb = n0 / 16 + u;
        if (rb * 16 < crows && kq < tk)
          memcpy(slot + c * 512, codes + wq_tile_index(rb, kq, tk) * 512, 512);
      }
      const long long kc = kt * 64;
      const int kin[2] = {kc < K, kc + 32 < K};
      const long long gi[2] = {kin[0] ? kc / G : 0, kin[1] ? (kc + 32) / G : 0};
      for (int u = 0; u < RB; u++) {
        int pos[2][2][32]; /* [b][h][lane]: the chunk position of each store */
        for (int b = 0; b < 2; b++)
          for (int lane = 0; lane < 32; lane++) { /* sm90_wq_half(u, b) */
            const int gr = lane >> 2, t = lane & 3, pb = wqmx_block(lane, b);
            uint32_t w[4];
            if (bits == 4)
              memcpy(w, slot + u * 512 + lane * 16 + 8 * pb, 8);
            else
              memcpy(w, slot + u * 1024 + 512 * pb + lane * 16, 16);
            float sc[2];
            unsigned v[2][4];
            for (int h = 0; h < 2; h++) {
              const long long r = n0 + u * 16 + gr + 8 * h;
              sc[h] = r < R && kin[pb] ? scales[r * ng + gi[pb]] : 0.f;
            }
            wq_block_bf16(bits, w, sc, v);
            for (int h = 0; h < 2; h++) {
              const int at = wqmx_sw128(u * 16 + gr + 8 * h, 4 * pb + t);
              memcpy(tile + at, v[h], 16);
              pos[b][h][lane] = (at % 128) / 16;
            }
          }
        for (int b = 0; b < 2; b++)
          for (int h = 0; h < 2; h++)
            for (int q = 0; q < 4; q++) {
              int hit = 0;
              for (int l = 8 * q; l < 8 * q + 8; l++)
                hit |= 1 << pos[b][h][l];
              *conflicts += hit != 0xff;
            }
      }
      for (int rl = 0; rl < bn; rl++) /* the consumers' view */
        for (int k = 0; k < 64; k++) {
          uint16_t val;
          memcpy(&val, tile + wqmx_sw128(rl, k / 8) + (k % 8) * 2, 2);
          const int64_t r = n0 + rl, kk = kc + k;
          if (r < R && kk < K) {
            *bad += seen[r * K + kk]++ != 0;
            out[r * K + kk] = val;
          } else if (r < crows && (val & 0x7fff) != 0) /* past R within the codes, or past K: zero */
            ++*bad;
        }
    }
  for (int64_t at = 0; at < R * K; at++)
    *bad += seen[at] == 0;
  free(slot), free(tile), free(seen);
}

static void check_case(int bits, int64_t K, int64_t N, int64_t group) {
  /* b [K, N] under the policy; column 1 all zero, column 2 one outlier, the rest random */
  double *bv = malloc(sizeof(double) * (size_t)(K * N)), *iv = calloc((size_t)(K * K), sizeof(double));
  float *bnk = malloc(sizeof(float) * (size_t)(K * N));
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) {
      double v = n == 1 ? 0.0 : n == 2 ? (k == K / 3 ? 40.0 : 0.01 * uniform()) : uniform() * (1 + k % 7);
      bv[k * N + n] = (float)v;
      bnk[n * K + k] = (float)v;
    }
  for (int64_t k = 0; k < K; k++)
    iv[k * K + k] = 1;
  Graph *g = graph_create("wq", "test.ffn");
  g->prec.type[PREC_WEIGHTS] = bits == 8 ? DT_I8 : DT_I4;
  g->prec.group = (int)group;
  Node *x = ir_input(g, "x", SHAPE(K, K), DT_F32, here);
  Node *b = weight(g, "b", SHAPE(K, N), DT_F32);
  graph_add_output(g, "y", op2(g, OP_MATMUL, DT_F32, x, b));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "x", DT_F32, DIMS(K, K), iv);
  put(&w, "b", DT_F32, DIMS(K, N), bv);
  RefTensor y;
  char err[256];
  CHECK(run(g, &w, &in, &y, err, sizeof err) == 0, "%s", err);
  float *scales = malloc(sizeof(float) * (size_t)(N * K)), *dec = malloc(sizeof(float) * (size_t)(N * K));
  unsigned char *codes = malloc((size_t)(wq_code_rows(N) * wq_row_bytes(K, bits)));
  host_pack(bnk, N, K, bits, group, scales, codes);
  int64_t bad = 0;
  for (int mode = 0; mode < (bits == 8 ? 3 : 2); mode++) { /* bf16, f16, (i8) bf16 as gemm_wqdl */
    const int f16 = mode == 1, lean = mode == 2;
    int64_t pad_bad = 0; /* the padding past K and past the last row holds level 0 */
    decode_all(codes, scales, N, K, bits, group, f16, lean, dec, &pad_bad);
    bad += pad_bad;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < K; k++) {
        float gpu = dec[n * K + k], ref = y.data[k * N + n];
        if (memcmp(&gpu, &ref, sizeof gpu) != 0 && bad++ < 3)
          fprintf(stderr, "i%d K=%lld G=%lld %s: weight (k %lld, n %lld): packed %.9g, reference %.9g\n", bits,
                  (long long)K, (long long)group, f16 ? "f16" : lean ? "bf16 (gemm_wqdl)" : "bf16", (long long)k,
                  (long long)n, gpu, ref);
      }
  }
  CHECK(bad == 0, "i%d K=%lld N=%lld G=%lld: %lld weights differ from the reference's", bits, (long long)K,
        (long long)N, (long long)group, (long long)bad);
  if (K % 8 == 0) { /* prefill: the reference's weights rounded once to bf16 (ir/interp.c's contract) */
    uint16_t *dq = malloc(sizeof(uint16_t) * (size_t)(N * K));
    int64_t twice = 0, off = 0;
    dequant_all(codes, scales, N, K, bits, group, dq, &twice);
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < K; k++)
        if (dq[n * K + k] != bf16_rne(y.data[k * N + n]) && off++ < 3)
          fprintf(stderr, "i%d K=%lld G=%lld dequantized: weight (k %lld, n %lld): %#x, reference bf16 %#x\n", bits,
                  (long long)K, (long long)group, (long long)k, (long long)n, dq[n * K + k],
                  bf16_rne(y.data[k * N + n]));
    CHECK(twice == 0 && off == 0, "i%d K=%lld N=%lld G=%lld dequantized: %lld weights written twice or never, %lld "
          "differ from the reference's rounded to bf16", bits, (long long)K, (long long)N, (long long)group,
          (long long)twice, (long long)off);
    static const int widths[] = {128, 224, 256}; /* the mixed-input tiles' */
    for (int i = 0; i < 3; i++) {
      int64_t mbad = 0, conflicts = 0, moff = 0;
      memset(dq, 0xff, sizeof(uint16_t) * (size_t)(N * K)); /* poisoned */
      mixed_all(codes, scales, N, K, bits, group, widths[i], dq, &mbad, &conflicts);
      for (int64_t at = 0; at < N * K; at++)
        moff += dq[at] != bf16_rne(y.data[(at % K) * N + at / K]);
      CHECK(mbad == 0 && conflicts == 0 && moff == 0,
            "i%d K=%lld N=%lld G=%lld mixed-input tile of %d rows: %lld weights misplaced or past the tensor not zero, "
            "%lld quarter warps with a bank conflict, %lld weights differ from the reference's rounded to bf16",
            bits, (long long)K, (long long)N, (long long)group, widths[i], (long long)mbad, (long long)conflicts,
            (long long)moff);
    }
    free(dq);
  }
  ref_free(&y);
  store_free(&w);
  store_free(&in);
  graph_destroy(g);
  free(bv), free(iv), free(bnk), free(scales), free(dec), free(codes);
}

int main(void) {
  unsigned seed = (unsigned)time(NULL);
  if (getenv("FFNC_TEST_SEED"))
    seed = (unsigned)strtoul(getenv("FFNC_TEST_SEED"), NULL, 0);
  printf("seed %u (replay with FFNC_TEST_SEED=%u)\n", seed, seed);
  srand(seed);
  check_i8_bytes();
  check_case(8, 77, 9, 0);    /* per column; K not a multiple of a 16-byte word */
  check_case(8, 256, 5, 0);
  check_case(4, 200, 6, 64);  /* groups 64, 64, 64, 8 */
  check_case(4, 96, 7, 32);
  check_case(4, 360, 4, 128); /* groups 128, 128, 104 */
  check_case(4, 130, 5, 0);   /* one group over K */
  check_case(4, 64, 3, 128);  /* a group longer than K: one group */
  check_case(8, 100, 37, 0);  /* rows past the last 16-row block */
  check_case(4, 296, 18, 32); /* a half-empty last 64-k tile */
  return check_result("wq_pack_test");
}
