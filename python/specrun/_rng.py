"""The bootstrap's random stream, as specrun's C++ draws it (src/analysis/summary.cpp): a
std::mt19937_64 seeded with the job's seed, and std::uniform_int_distribution<size_t>(0, n - 1)
as libstdc++ (GCC 11 and later) implements it for a 64-bit generator: Lemire's nearly
divisionless method (the high 64 bits of x * n, rejecting x when the low 64 bits fall below
2^64 mod n). With both reproduced, the Python intervals equal the C++ ones number for number.
"""
import numpy as np

_N, _M = 312, 156
_MATRIX_A = np.uint64(0xB5026F5AA96619E9)
_UPPER = np.uint64(0xFFFFFFFF80000000)
_LOWER = np.uint64(0x7FFFFFFF)
_MASK64 = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64, a block of 312 outputs at a time (numpy, vectorised twist)."""

    def __init__(self, seed):
        mt = [int(seed) & _MASK64]
        for i in range(1, _N):
            prev = mt[-1]
            mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & _MASK64)
        self._mt = np.array(mt, dtype=np.uint64)

    @staticmethod
    def _mix(y):
        return (y >> np.uint64(1)) ^ np.where((y & np.uint64(1)) != 0, _MATRIX_A, np.uint64(0))

    def _twist(self):
        mt = self._mt
        k = np.arange(0, _N - _M)
        y = (mt[k] & _UPPER) | (mt[k + 1] & _LOWER)
        mt[k] = mt[k + _M] ^ self._mix(y)
        k = np.arange(_N - _M, _N - 1)
        y = (mt[k] & _UPPER) | (mt[k + 1] & _LOWER)
        mt[k] = mt[k + (_M - _N)] ^ self._mix(y)
        y = (mt[_N - 1:] & _UPPER) | (mt[:1] & _LOWER)
        mt[_N - 1:] = mt[_M - 1:_M] ^ self._mix(y)

    def block(self):
        """The next 312 outputs (uint64)."""
        self._twist()
        z = self._mt.copy()
        z ^= (z >> np.uint64(29)) & np.uint64(0x5555555555555555)
        z ^= (z << np.uint64(17)) & np.uint64(0x71D67FFFEDA60000)
        z ^= (z << np.uint64(37)) & np.uint64(0xFFF7EEE000000000)
        z ^= z >> np.uint64(43)
        return z



class Picker:
    """Successive draws of std::uniform_int_distribution<size_t>(0, n - 1) from one generator."""

    def __init__(self, seed):
        self._gen = MT19937_64(seed)
        self._buffer = np.zeros(0, np.uint64)

    def _take(self, count):
        while len(self._buffer) < count:
            self._buffer = np.concatenate([self._buffer, self._gen.block()])
        out, self._buffer = self._buffer[:count], self._buffer[count:]
        return out

    def draws(self, n, count):
        """`count` successive values in [0, n), n < 2^32."""
        if not 0 < n < (1 << 32):
            raise ValueError("the bootstrap resamples 1 to 2^32 - 1 items, not %d" % n)
        rn = np.uint64(n)
        threshold = np.uint64(((1 << 64) - n) % n)
        out = np.zeros(0, np.uint64)
        while len(out) < count:
            x = self._take(count - len(out))
            low = x * rn  # the low 64 bits of the 128-bit product (numpy wraps modulo 2^64)
            # high 64 bits: x = xh 2^32 + xl, so x n = xh n 2^32 + xl n; no term overflows for n < 2^32
            xh, xl = x >> np.uint64(32), x & np.uint64(0xFFFFFFFF)
            high = (xh * rn + ((xl * rn) >> np.uint64(32))) >> np.uint64(32)
            out = np.concatenate([out, high[low >= threshold]])  # rejected draws are skipped
        return out.astype(np.int64)
