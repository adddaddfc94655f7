/* opmath.cuh: the scalar math of every elementwise op of ir/ops.def, written once.
 *
 * op_<math>(x) or op_<math>(x, y) for each UNARY_OP / BINARY_OP row. This file is both C11
 * and CUDA C++ and is included once per number type, after defining OPMATH_FLOAT:
 *   ir/interp.c   OPMATH_FLOAT 0, host C: the CPU reference computes in double and rounds
 *                 each result once to its element type (the caller rounds);
 *   common.cuh    OPMATH_FLOAT 1, device, namespace ffn: the generated kernels compute in f32
 *                 with the accurate library functions (expf, erff, tanhf; no fast math), but
 *                 for sigmoid, silu and gelu_tanh (OPM_SIG below: ~1e-6 relative);
 *   prep.cuh      OPMATH_FLOAT 0, device, namespace ffn: load-time transforms, exact like the
 *                 reference.
 * op_<math>_grad(x) is the derivative of a unary op (d op_<math> / dx), for the backward
 * graphs of passes/grad.c: it is an op of its own (ops.def), so its math lives here too.
 * In C++ the float and double functions are overloads. It includes nothing: <math.h> (C) or
 * the CUDA math library must be visible. Constants are cast to the number type, so the f32
 * code never computes in double.
 */
#ifndef OPMATH_FLOAT
#error "define OPMATH_FLOAT (0: double, 1: float) before including opmath.cuh"
#endif

#if OPMATH_FLOAT
#define OPM_T float
#define OPM_LIB(fn) fn##f /* expf, erff, tanhf */
#else
#define OPM_T double
#define OPM_LIB(fn) fn
#endif
#ifdef __CUDACC__
#define OPM_FN static __device__ __forceinline__
#else
#define OPM_FN static inline
#endif
/* OPM_SIG(a, x): a / (1 + exp(-x)), the sigmoid (a = 1) and silu (a = x). In the f32 device
 * code with the hardware's exp2 and reciprocal (__expf, __fdividef: a few ulp, ~1e-6 relative for
 * |x| < 20, far below a 16-bit output's rounding; 0 where the value is below 1e-36, x < -87), not
 * expf and IEEE division: those take ~25 instructions with a slow-path branch, and a GEMM epilogue
 * unrolls 64 to 128 of them a thread, code the SM fetches anew for every tile (kernels/NOTES.md,
 * "Twenty-seventh session": a silu epilogue at 62% of cuBLASLt's rate, the plain product at 94%).
 * NaN and +-inf come out as from the exact formula. */
#if OPMATH_FLOAT && defined(__CUDACC__)
#define OPM_SIG(a, x) __fdividef((a), 1.f + __expf(-(x)))
#else
#define OPM_SIG(a, x) ((a) / ((OPM_T)1 + OPM_LIB(exp)(-(x))))
#endif

OPM_FN OPM_T op_neg(OPM_T x) { return -x; }
OPM_FN OPM_T op_relu(OPM_T x) { return x > 0 ? x : (OPM_T)0; }
OPM_FN OPM_T op_relu_grad(OPM_T x) { return x > 0 ? (OPM_T)1 : (OPM_T)0; }
OPM_FN OPM_T op_gelu(OPM_T x) {
  const OPM_T k = (OPM_T)0.70710678118654752440; /* 1 / sqrt(2) */
  return (OPM_T)0.5 * x * ((OPM_T)1 + OPM_LIB(erf)(x * k));
}
OPM_FN OPM_T op_gelu_grad(OPM_T x) { /* Phi(x) + x phi(x) */
  const OPM_T k = (OPM_T)0.70710678118654752440, c = (OPM_T)0.39894228040143267794; /* 1 / sqrt(2 pi) */
  return (OPM_T)0.5 * ((OPM_T)1 + OPM_LIB(erf)(x * k)) + x * c * OPM_LIB(exp)((OPM_T)-0.5 * x * x);
}
OPM_FN OPM_T op_gelu_tanh(OPM_T x) { /* 0.5 x (1 + tanh(y)) = x sigmoid(2 y), y = k (x + 0.044715 x^3) */
  const OPM_T k2 = (OPM_T)1.59576912160573071176; /* 2 sqrt(2 / pi) */
  return OPM_SIG(x, k2 * (x + (OPM_T)0.044715 * x * x * x));
}
OPM_FN OPM_T op_gelu_tanh_grad(OPM_T x) {
  const OPM_T k = (OPM_T)0.79788456080286535588;
  OPM_T t = OPM_LIB(tanh)(k * (x + (OPM_T)0.044715 * x * x * x));
  return (OPM_T)0.5 * ((OPM_T)1 + t) +
         (OPM_T)0.5 * x * ((OPM_T)1 - t * t) * k * ((OPM_T)1 + (OPM_T)3 * (OPM_T)0.044715 * x * x);
}
OPM_FN OPM_T op_silu(OPM_T x) { return OPM_SIG(x, x); }
OPM_FN OPM_T op_silu_grad(OPM_T x) { /* s (1 + x (1 - s)), s = sigmoid(x) */
  OPM_T s = OPM_SIG((OPM_T)1, x);
  return s * ((OPM_T)1 + x * ((OPM_T)1 - s));
}
OPM_FN OPM_T op_sigmoid(OPM_T x) { return OPM_SIG((OPM_T)1, x); }
OPM_FN OPM_T op_sigmoid_grad(OPM_T x) {
  OPM_T s = OPM_SIG((OPM_T)1, x);
  return s * ((OPM_T)1 - s);
}
OPM_FN OPM_T op_tanh(OPM_T x) { return OPM_LIB(tanh)(x); }
OPM_FN OPM_T op_tanh_grad(OPM_T x) {
  OPM_T t = OPM_LIB(tanh)(x);
  return (OPM_T)1 - t * t;
}
OPM_FN OPM_T op_square(OPM_T x) { return x * x; }
OPM_FN OPM_T op_square_grad(OPM_T x) { return (OPM_T)2 * x; }
/* The rounding to the result's element type is the whole op; whoever stores the value (or,
 * inside a kernel, the code generator) rounds it. */
OPM_FN OPM_T op_cast(OPM_T x) { return x; }

OPM_FN OPM_T op_add(OPM_T x, OPM_T y) { return x + y; }
OPM_FN OPM_T op_sub(OPM_T x, OPM_T y) { return x - y; }
OPM_FN OPM_T op_mul(OPM_T x, OPM_T y) { return x * y; }
OPM_FN OPM_T op_div(OPM_T x, OPM_T y) { return x / y; }

#undef OPM_FN
#undef OPM_SIG
#undef OPM_LIB
#undef OPM_T
#undef OPMATH_FLOAT
