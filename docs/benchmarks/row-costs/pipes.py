"""Which vector instructions share the unit that runs the kernels' dot product
(docs/benchmarks/kernel-paths, 2026-12-04): a loop of 16 independent dot products (`vpdpbusd`
zmm, or `vpmaddubsw` ymm with `--ymm`) plus 8 of another instruction, timed single-threaded,
best of 5; "slots" = the loop's time in dot products. Writes the C program to a temporary
directory, builds it with gcc, runs it.
Usage: python pipes.py [--ymm]"""
import subprocess, sys, tempfile
from pathlib import Path

YMM = "--ymm" in sys.argv
R = "ymm" if YMM else "zmm"
DOT = "vpmaddubsw" if YMM else "vpdpbusd"
OTHERS = {  # name -> the instruction, {i}: its number 0..7 (its memory offset), {d}: a register
    "vfmadd231ps": "vfmadd231ps %%{r}14, %%{r}15, %%{r}{d}", "vmulps": "vmulps %%{r}14, %%{r}15, %%{r}{d}",
    "vpmaddwd": "vpmaddwd %%{r}14, %%{r}15, %%{r}{d}", "vpaddw": "vpaddw %%{r}14, %%{r}15, %%{r}{d}",
    "vpaddd": "vpaddd %%{r}14, %%{r}15, %%{r}{d}", "vcvtdq2ps": "vcvtdq2ps %%{r}14, %%{r}{d}",
    "vpand": "vpand{q} %%{r}14, %%{r}15, %%{r}{d}", "vpsrlw": "vpsrlw $4, %%{r}14, %%{r}{d}",
    "vpbroadcastd (memory)": "vpbroadcastd {i}*4(%0), %%{r}{d}",
    "load": "vmovdqu{q} {i}*64(%0), %%{r}{d}", "store": "vmovdqu{q} %%{r}14, {i}*64(%0)",
}
if not YMM:
    OTHERS["vpmulld"] = "vpmulld %%{r}14, %%{r}15, %%{r}{d}"
    OTHERS["vpdpwssd"] = "vpdpwssd %%{r}14, %%{r}15, %%{r}{d}"
    OTHERS["vpdpbusd, x broadcast"] = "vpdpbusd {i}*4(%0)%{{1to16%}}, %%{r}15, %%{r}{d}"


def block(template: str, count: int, first: int, regs: int) -> str:
    q = "" if YMM else ("d" if "vpand" in template else "64")
    return "".join('"' + template.format(r=R, i=i, d=first + i % regs, q=q) + '\\n"'
                   for i in range(count))


dots = block(DOT + " %%{r}14, %%{r}15, %%{r}{d}", 16, 0, 8)
clobbers = ",".join(f'"{R}{i}"' for i in range(14))
cases = [dots] + [dots + block(t, 8, 8, 6) for t in OTHERS.values()]
names = [f"16 {DOT}"] + [f"+ 8 {n}" for n in OTHERS]
body = "\n".join(f'if (v == {k}) __asm__ volatile({c} :: "r"(mem) : {clobbers}, "memory");'
                 for k, c in enumerate(cases))
program = f"""#include <stdio.h>
#include <time.h>
static int mem[1024] __attribute__((aligned(64)));
static double run(int v) {{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long it = 0; it < 20000000L; it++) {{ {body} }}
    clock_gettime(CLOCK_MONOTONIC, &b);
    return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 20000000L;
}}
int main(void) {{
    const char *names[] = {{{", ".join(f'"{n}"' for n in names)}}};
    double best[{len(cases)}];
    for (int v = 0; v < {len(cases)}; v++) best[v] = 1e30;
    for (int r = 0; r < 5; r++)
        for (int v = 0; v < {len(cases)}; v++) {{ double t = run(v); if (t < best[v]) best[v] = t; }}
    for (int v = 0; v < {len(cases)}; v++)
        printf("%-28s %6.3f ns  %5.2f slots\\n", names[v], best[v], best[v] / best[0] * 16);
    return 0;
}}
"""
with tempfile.TemporaryDirectory() as d:
    src, exe = Path(d, "pipes.c"), Path(d, "pipes")
    src.write_text(program)
    flags = ["-mavx2"] if YMM else ["-mavx512f", "-mavx512bw", "-mavx512vnni"]
    subprocess.run(["gcc", "-O2", *flags, str(src), "-o", str(exe)], check=True)
    subprocess.run([str(exe)], check=True)
