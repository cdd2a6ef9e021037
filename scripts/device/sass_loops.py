#!/usr/bin/env python3
"""The instructions of each kernel's main loop, from `cuobjdump -sass`: a static count, no GPU.

For each function whose name contains PATTERN, the largest backward branch that encloses tensor-core
instructions (HMMA) is taken as its main loop. Prints the loop's instruction count, its HMMA count,
instructions per HMMA and the most frequent opcodes. A kernel that streams weights through
mma.sync is bound by issue slots once instructions per byte are high enough, so this count,
compared before and after a change, says whether the change took work out of the loop. It counts
every instruction in the loop's span, including branches not taken on the common path, so it
is a comparison, not an execution count.

    cuobjdump -sass OBJ > out.sass    # cuobjdump and nvdisasm: NVIDIA's PyPI wheels
    sass_loops.py out.sass [PATTERN]  # default pattern: quant_
"""
import collections
import re
import sys

INSTRUCTION = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\s+(0x[0-9a-f]+)")
PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")


def functions(text):
    """(mangled name, [(address, instruction text)]) for each function of the listing."""
    for chunk in re.split(r"\n\s*Function : ", text)[1:]:
        name, _, body = chunk.partition("\n")
        yield name.strip(), [(int(m.group(1), 16), m.group(2)) for m in map(INSTRUCTION.match, body.split("\n")) if m]


def main_loop(instructions):
    """The longest span [branch target, backward branch] holding an HMMA, or None."""
    at = {address: i for i, (address, _) in enumerate(instructions)}
    best = None
    for i, (address, text) in enumerate(instructions):
        m = BRANCH.search(text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= address or target not in at:
            continue
        span = instructions[at[target]:i + 1]
        if any("HMMA" in t for _, t in span) and (best is None or len(span) > len(best)):
            best = span
    return best


def opcode(text):
    return PREDICATE.sub("", text).split()[0].split(".")[0]


def report(text, pattern="quant_"):
    rows = []
    for name, instructions in functions(text):
        if pattern not in name:
            continue
        loop = main_loop(instructions)
        if loop is None:
            continue
        ops = collections.Counter(opcode(t) for _, t in loop)
        rows.append({"function": name, "loop": len(loop), "hmma": ops["HMMA"], "ops": ops})
    return rows


def main(argv):
    if len(argv) < 2:
        print("usage: sass_loops.py out.sass [PATTERN]", file=sys.stderr)
        return 2
    with open(argv[1], errors="replace") as f:
        rows = report(f.read(), argv[2] if len(argv) > 2 else "quant_")
    for r in rows:
        common = " ".join(f"{k}:{v}" for k, v in r["ops"].most_common(10))
        print(f"{r['function']}\n  loop {r['loop']} instructions, {r['hmma']} HMMA, "
              f"{r['loop'] / r['hmma']:.1f} per HMMA; {common}")
    if not rows:
        print("no function with a loop of HMMA matches", file=sys.stderr)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
