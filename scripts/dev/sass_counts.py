#!/usr/bin/env python3
"""Instruction counts of the kernels in a cubin, without a disassembler (none is packaged for this
machine): sm_90 instructions are 16 bytes, so a kernel's .text section size / 16 is its static count,
and the low 12 bits of an instruction's first word are its opcode (with the operand form).

  nvcc -cubin -O3 -arch=sm_90a -std=c++17 -DTESSERA_HAVE_CUDA=1 -DTESSERA_CUDA_ARCHS='"90a-real"' \\
       -Isrc src/ops/cuda/kernels/quant/grouped_mma.cu -o /tmp/k.cubin
  python3 scripts/dev/sass_counts.py /tmp/k.cubin [substring of a kernel's mangled name ...]

Without names: every kernel's count. With names: an opcode histogram per matching kernel, side by
side. The opcode names below were read off kernels whose source fixes them (docs/PERFORMANCE.md,
"Instruction counts read from the compiled kernels"); others print as hex."""
import collections
import struct
import sys

OPCODES = {0x816: "PRMT", 0x23C: "HMMA", 0x981: "LDG", 0x232: "HMUL2", 0x224: "IMAD(reg)", 0x230: "HADD2.F32",
           0x23E: "F2FP", 0x812: "LOP3(imm)", 0x824: "IMAD(imm)", 0x820: "FMUL(imm)", 0x947: "BRA"}


def text_sections(path):
    d = open(path, "rb").read()
    shoff = struct.unpack_from("<Q", d, 0x28)[0]
    entsize, num, strndx = struct.unpack_from("<HHH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", d, shoff + i * entsize) for i in range(num)]
    strings = secs[strndx][4]
    for name, _type, _flags, _addr, off, size in secs:
        end = d.index(b"\0", strings + name)
        n = d[strings + name:end].decode()
        if n.startswith(".text."):
            yield n[len(".text."):], d[off:off + size]


def main():
    path, names = sys.argv[1], sys.argv[2:]
    kernels = dict(text_sections(path))
    if not names:
        for n, code in kernels.items():
            print(f"{len(code) // 16:6d} {n}")
        return
    hists = []
    for want in names:
        match = [n for n in kernels if want in n]
        if len(match) != 1:
            sys.exit(f"'{want}' matches {len(match)} kernels")
        code = kernels[match[0]]
        hists.append(collections.Counter(struct.unpack_from("<Q", code, i)[0] & 0xFFF for i in range(0, len(code), 16)))
    print(f"{'opcode':<12}" + "".join(f"{w[-20:]:>22}" for w in names))
    for op in sorted(set().union(*hists)):
        print(f"{OPCODES.get(op, hex(op)):<12}" + "".join(f"{h[op]:>22}" for h in hists))
    print(f"{'total':<12}" + "".join(f"{sum(h.values()):>22}" for h in hists))


if __name__ == "__main__":
    main()
