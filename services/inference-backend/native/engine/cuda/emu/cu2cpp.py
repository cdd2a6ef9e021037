#!/usr/bin/env python3
"""Rewrites a .cu file into C++ for the CPU emulation (emu.h): each kernel launch
`kernel<<<grid, block[, shared[, stream]]>>>(args);` becomes
`::strata::emu::launch(&kernel, grid, block[, shared[, stream]])(args);`, each
`cudaLaunchKernelEx(` becomes `::strata::emu::launch_ex(`, and each
`extern __shared__ [__align__(n)] T name[];` becomes a pointer to the launch's dynamic shared
memory; `threadIdx`, `blockIdx`, `blockDim` and `gridDim` (not as member names, so a
cudaLaunchConfig_t's `.gridDim` stays) become calls into the emulation. Each header the file
includes with quotes and a .cuh name is rewritten the same way, next to the output, where the
output's #include finds it first.
Everything else is left as written, so the emulation runs the very kernels nvcc compiles.
    cu2cpp.py in.cu out.cpp
"""
import os
import re
import sys


def matching(text, start, open_ch, close_ch):
    """Index just past the bracket closing the one at `start`."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unbalanced {open_ch} at offset {start}")


def rewrite_launches(text):
    out, pos = [], 0
    while True:
        at = text.find("<<<", pos)
        if at < 0:
            out.append(text[pos:])
            return "".join(out)
        line_start = text.rfind("\n", 0, at) + 1
        indent = len(text[line_start:at]) - len(text[line_start:at].lstrip())
        kernel = text[line_start + indent:at].strip()
        config_end = text.find(">>>", at)
        config = text[at + 3:config_end]
        args_open = config_end + 3
        if text[args_open] != "(":
            raise ValueError(f"launch of {kernel} without an argument list")
        args_close = matching(text, args_open, "(", ")")
        out.append(text[pos:line_start + indent])
        out.append(f"::strata::emu::launch(&{kernel}, {config}){text[args_open:args_close]}")
        pos = args_close


SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?((?:unsigned\s+)?[\w:]+)\s+(\w+)\s*\[\s*\]\s*;")
BUILTINS = re.compile(r"(?<![\w.])(?<!->)\b(threadIdx|blockIdx|blockDim|gridDim)\b")
BUILTIN_CALLS = {"threadIdx": "thread_idx", "blockIdx": "block_idx", "blockDim": "block_dim", "gridDim": "grid_dim"}
LOCAL_HEADER = re.compile(r'^\s*#\s*include\s+"([^"]+\.cuh)"', re.M)
LAUNCH_EX = re.compile(r"(?<![\w:])cudaLaunchKernelEx\s*\(")


def write_if_changed(dst, text):
    """Atomically (parallel runs share the rewritten headers), and only when the text changed."""
    if os.path.exists(dst):
        with open(dst, encoding="utf-8") as f:
            if f.read() == text:
                return
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    tmp = f"{dst}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, dst)


def rewrite(src, dst):
    with open(src, encoding="utf-8") as f:
        text = f.read()
    text = SHARED.sub(lambda m: f"{m[1]}* {m[2]} = reinterpret_cast<{m[1]}*>(::strata::emu::dynamic_shared());", text)
    text = BUILTINS.sub(lambda m: f"(::strata::emu::{BUILTIN_CALLS[m[1]]}())", text)
    text = LAUNCH_EX.sub("::strata::emu::launch_ex(", text)
    text = rewrite_launches(text)
    write_if_changed(dst, text)
    for header in LOCAL_HEADER.findall(text):
        found = os.path.join(os.path.dirname(os.path.abspath(src)), header)
        if os.path.exists(found):
            rewrite(found, os.path.join(os.path.dirname(os.path.abspath(dst)), header))


def main():
    rewrite(sys.argv[1], sys.argv[2])


if __name__ == "__main__":
    main()
