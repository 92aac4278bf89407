#!/usr/bin/env python3
"""Fits the minimax polynomials of ir/poly_math.h and prints them as C++.

Each polynomial is found by the Remez exchange algorithm in 60-digit
arithmetic (mpmath), then its coefficients are rounded to the precision that
evaluates them (hex literals, so the header holds exactly the values used).
The printed error is the weighted minimax error before that rounding; the
accuracy of the finished functions is measured by
tests/codegen/poly_math_test.cc.

Usage: scripts/fit_poly_math.py [kExpF32 ...]   (needs python3-mpmath)
"""
import struct
import sys

from mpmath import mp, mpf, matrix, lu_solve, cos, pi, exp, log, log1p, tanh, erf, erfc, sqrt

mp.dps = 60


def horner(c, t):
    s = mpf(0)
    for k in reversed(c):
        s = s * t + k
    return s


def remez(f, w, n, a, b, iters=30, grid=4000):
    """c[0..n-1] minimizing max |w(t) (f(t) - sum c_k t^k)| over [a, b]."""
    a, b = mpf(a), mpf(b)
    ref = [a + (b - a) * (1 - cos(pi * i / n)) / 2 for i in range(n + 1)]
    gx = [a + (b - a) * (1 - cos(pi * mpf(i) / grid)) / 2 for i in range(grid + 1)]
    gf = [f(t) for t in gx]
    gw = [w(t) for t in gx]
    for _ in range(iters):
        lhs, rhs = matrix(n + 1, n + 1), matrix(n + 1, 1)
        for i, t in enumerate(ref):
            for k in range(n):
                lhs[i, k] = t**k
            lhs[i, n] = (-1) ** i / w(t)
            rhs[i] = f(t)
        sol = lu_solve(lhs, rhs)
        c = [sol[k] for k in range(n)]
        err = [gw[i] * (gf[i] - horner(c, gx[i])) for i in range(len(gx))]
        # The new reference: the largest error of each run of one sign.
        ext, i = [], 0
        while i < len(err):
            j, best = i, i
            while j < len(err) and (err[j] >= 0) == (err[i] >= 0):
                if abs(err[j]) > abs(err[best]):
                    best = j
                j += 1
            ext.append(best)
            i = j
        while len(ext) > n + 1:
            ext.pop(0 if abs(err[ext[0]]) < abs(err[ext[-1]]) else -1)
        if len(ext) < n + 1:
            break
        ref = [gx[i] for i in ext]
    return c, max(abs(e) for e in err)


def guarded(fn):
    """fn at 200 digits, moved off 0 where it is a removable singularity."""
    def g(t):
        with mp.workdps(200):
            t = mpf(t)
            if abs(t) < mpf(10) ** -80:
                t = mpf(10) ** -80
            return +fn(t)
    return g


def to_f32(v):
    return struct.unpack("f", struct.pack("f", float(v)))[0]


def hex_literal(v):
    h = float(v).hex()  # 0x1.xxxxxxxxxxxxxp+e
    mant, e = h.split("p")
    mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
    return f"{mant}p{int(e)}"


def emit(name, coeffs, is_double, err, what):
    rounded = [float(c) if is_double else to_f32(c) for c in coeffs]
    print(f"// {what}; minimax error {mp.nstr(err, 3)}")
    body = ", ".join(hex_literal(c) for c in rounded)
    print(f"constexpr double {name}[] = {{{body}}};")


def split_ln2(bits):
    """ln2 = hi + lo with hi's significand `bits` long, so n * hi is exact."""
    ln2 = log(2)
    scale = mpf(2) ** bits
    hi = mp.floor(ln2 * scale) / scale
    return float(hi), float(ln2 - hi)


def fits():
    """(name, is_double, what, thunk returning (coefficients, error))."""
    one = lambda t: mpf(1)
    half_ln2 = log(2) / 2 + mpf("1e-4")  # the reduced argument of exp
    s2_max = ((sqrt(2) - 1) / (sqrt(2) + 1)) ** 2  # s^2 in log
    g = guarded(lambda r: (exp(r) - 1 - r) / r**2)
    what = "exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2, relative"
    for name, n, dbl in (("kExpF32", 6, False), ("kExpF64", 11, True)):
        yield name, dbl, what, lambda n=n: remez(g, lambda r: 1 / g(r), n, -half_ln2, half_ln2)

    def q(z):
        s = sqrt(z)
        return (log1p(2 * s / (1 - s)) - 2 * s) / (s * z)
    q = guarded(q)
    what = "log1p(f) = 2s + s z P(z), s = f/(2+f), z = s^2, relative"
    for name, n, dbl in (("kLogF32", 3, False), ("kLogF64", 7, True)):
        yield name, dbl, what, lambda n=n: remez(q, lambda z: 1 / q(z), n, 0, s2_max)

    k = guarded(lambda u: (tanh(sqrt(u)) - sqrt(u)) / u ** mpf(1.5))
    for name, n, dbl, t in (("kTanhF32", 7, False, TANH_SMALL_F32),
                            ("kTanhF64", 13, True, TANH_SMALL_F64)):
        yield (name, dbl, f"tanh(x) = x + x u P(u), u = x^2 <= {t}^2, absolute",
               lambda n=n, t=t: remez(k, one, n, 0, mpf(t) ** 2))

    s = guarded(lambda u: erf(sqrt(u)) / sqrt(u) - 1)
    yield ("kErfSmallF32", False, f"erf(x) = x + x P(u), u = x^2 <= {ERF_SMALL}^2, absolute",
           lambda: remez(s, one, 7, 0, mpf(ERF_SMALL) ** 2))
    # In a - ERF_SMALL the terms of P share a sign where erfc is largest, so
    # evaluating P rounds little where it matters most.
    a0 = mpf(ERF_SMALL)
    yield ("kErfLargeF32", False,
           f"erf(a) = 1 - exp(P(a - {ERF_SMALL})), {ERF_SMALL} <= a <= 4, absolute in erf",
           lambda: remez(lambda t: log(erfc(t + a0)), lambda t: erfc(t + a0), 8, 0, 4 - a0))


# Where tanh and erf switch from the polynomial around 0 (ir/poly_math.h).
TANH_SMALL_F32, TANH_SMALL_F64, ERF_SMALL = "0.875", "0.625", "0.921875"


def main():
    only = set(sys.argv[1:])
    for name, dbl, what, fit in fits():
        if only and name not in only:
            continue
        c, e = fit()
        emit(name, c, dbl, e, what)
    if not only:
        for bits, what in ((16, "f32"), (32, "f64")):
            hi, lo = split_ln2(bits)
            lo = lo if what == "f64" else to_f32(lo)
            print(f"// ln2 for {what}: hi {hex_literal(hi)} lo {hex_literal(lo)}")


if __name__ == "__main__":
    main()
