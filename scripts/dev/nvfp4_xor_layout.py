#!/usr/bin/env python3
"""The device layout of NVFP4 codes (src/ops/cuda/kernels/quant/mma_pairs.h): a fixed invertible
linear map over GF(2) of each 32-bit word's bits, chosen so that the kernels get the word's four bf16
pairs in 8 integer instructions: with R_r = q rotated right by r, the pairs are q, R_12, R_2 ^ R_6
and R_2 ^ R_8, each masked (4 funnel shifts, then one LOP3 a pair). The permutation before it took
11 (3 rotations, then a byte permute and a mask a pair).

A pair's halves need the code's sign at bit 15 and e1 e0 m at bits 8 7 6 (the value times 2^-126);
every other bit must be zero, so each pair is MASK & (a register) or MASK & (register ^ register):
one LOP3 with the mask as its immediate. What the search shows:
  - q and rotations alone never work (the target bits are 16-periodic: 4 translates of {6, 7, 8, 15}
    do not tile Z16), nor with XORs of 3 rotations (--search), nor 8 pairs from two words' funnel
    shifts with up to 3 extra windows; 4 rotations and XORs do (4000 ways; a C version of
    count_rotation_maps(4), the Python one takes hours);
  - in some of those, two rotations act on the masked bits as plain left shifts, and ptxas then
    issues them as IMAD.SHL off the integer pipe (q ^ R_6, q ^ q << 6, q ^ q << 4, R_2): measured 5%
    slower at batch 16 on an H100 where this map is 1% faster (docs/PERFORMANCE.md).

  python3 scripts/dev/nvfp4_xor_layout.py            checks the kernels' map on random words
  python3 scripts/dev/nvfp4_xor_layout.py --search   also shows that 3 rotations never work (~10 s)
"""
import itertools
import random
import sys

MASK = 0x81C081C0
P = [6, 7, 8, 15, 22, 23, 24, 31]  # the mask's bits


def rotr(x, s):
    return ((x >> s) | (x << (32 - s))) & 0xFFFFFFFF if s else x


def decode(q):
    """The kernels' sequence (mma_pairs.h, nvfp4_pair_bits)."""
    return [q & MASK, rotr(q, 12) & MASK, (rotr(q, 2) ^ rotr(q, 6)) & MASK, (rotr(q, 2) ^ rotr(q, 8)) & MASK]


def checkpoint_word(q):
    """The checkpoint word (value j in nibble j: sign, e1, e0, m) a device word decodes to."""
    pairs = decode(q)
    w = 0
    for c in range(8):
        half = pairs[c // 2] >> (16 * (c % 2))
        w |= (((half >> 6) & 7) | ((half >> 15) & 1) << 3) << (4 * c)
    return w


def inverse_columns():
    """Gauss-Jordan over GF(2): column[b] = the device word whose checkpoint word is bit b."""
    image = [checkpoint_word(1 << j) for j in range(32)]
    source = [1 << j for j in range(32)]
    for b in range(32):
        pivot = next(j for j in range(b, 32) if image[j] >> b & 1)  # StopIteration: not invertible
        image[b], image[pivot] = image[pivot], image[b]
        source[b], source[pivot] = source[pivot], source[b]
        for j in range(32):
            if j != b and image[j] >> b & 1:
                image[j] ^= image[b]
                source[j] ^= source[b]
    return source


def device_word(w, columns):
    q = 0
    for b in range(32):
        if w >> b & 1:
            q ^= columns[b]
    return q


def reference_pair(w, i):
    """bf16 bits of values 2i, 2i + 1 of a checkpoint word, each times 2^-126."""
    def half(nib):
        return (nib >> 3) << 15 | (nib & 7) << 6
    return half((w >> (8 * i)) & 0xF) | half((w >> (8 * i + 4)) & 0xF) << 16


def rank(rows):
    basis = {}
    for v in rows:
        while v:
            h = v.bit_length() - 1
            if h not in basis:
                basis[h] = v
                break
            v ^= basis[h]
    return len(basis)


def count_rotation_maps(k):
    """Maps from q and k rotations, each pair one register or the XOR of two, that are invertible."""
    found = 0
    for rots in itertools.combinations(range(1, 32), k):
        regs = (0,) + rots
        cands = [(a,) for a in regs] + list(itertools.combinations(regs, 2))
        rows = {c: [sum(1 << ((p + r) % 32) for r in c) if len(c) == 1 else
                    (1 << ((p + c[0]) % 32)) ^ (1 << ((p + c[1]) % 32)) for p in P] for c in cands}
        for combo in itertools.combinations(cands, 4):
            if set(r for c in combo for r in c) >= set(rots) and rank(sum((rows[c] for c in combo), [])) == 32:
                found += 1
    return found


def main():
    columns = inverse_columns()
    rng = random.Random(1)
    for _ in range(100000):
        w = rng.getrandbits(32)
        q = device_word(w, columns)
        assert checkpoint_word(q) == w
        got = decode(q)
        for i in range(4):
            assert got[i] == reference_pair(w, i), (hex(w), i)
    print("decode(device_word(w)) == the reference bf16 pairs on 100000 random words")
    if "--search" in sys.argv:
        print(f"invertible maps from q and 3 rotations: {count_rotation_maps(3)}")


if __name__ == "__main__":
    main()
