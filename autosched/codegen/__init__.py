"""Kernel code generation by hand: AMX and VNNI/AVX-512 low-precision micro-kernels, fast math (exp, erf)."""
