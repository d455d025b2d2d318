#!/usr/bin/env bash
# Declare-target analysis cost: a call chain of depth 24 (each f_i calls f_{i+1} twice: 2^24
# paths, where flang's marking pass is exponential) and a wide DAG of 10,000 functions.
# Prints the analysis time (graph + phases, from `ompcc -v`) next to the front end's own time.
# Usage: scripts/bench-declare-target.sh [19|22]
set -euo pipefail
V=${1:-22}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OMPCC=${OMPCC:-$ROOT/dist/bin/ompcc}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cd "$W"
ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }

# C chain
{ echo "int f24(int x) { return x + 1; }"
  for i in $(seq 23 -1 0); do echo "int f$i(int x) { return f$((i+1))(x) + f$((i+1))(x + 1); }"; done
  echo 'int main(void) { int r = 0;'
  echo '#pragma omp target map(tofrom: r)'
  echo '  r = f0(1);'
  echo '  return r == 0; }'; } > chain.c
# Fortran chain
{ echo "integer function f24(x)"; echo "  integer :: x"; echo "  f24 = x + 1"; echo "end function"
  for i in $(seq 23 -1 0); do
    echo "integer function f$i(x)"; echo "  integer :: x, f$((i+1))"; echo "  f$i = f$((i+1))(x) + f$((i+1))(x + 1)"; echo "end function"
  done
  echo "program p"; echo "  integer :: r, f0"; echo "  r = 0"; echo "  !\$omp target map(tofrom: r)"; echo "  r = f0(1)"
  echo "  !\$omp end target"; echo "  print *, r"; echo "end program"; } > chain.f90
# C wide DAG of 10,000 functions: 100 layers of 100; g_l_k calls g_{l+1}_k and g_{l+1}_{k+1}.
# (A 10,000-deep chain crashes clang's own code generation, so the DAG is wide instead.)
{ for l in $(seq 99 -1 0); do
    for k in $(seq 0 99); do
      if [ $l -eq 99 ]; then echo "int g${l}_$k(int x) { return x + $k; }"
      else echo "int g${l}_$k(int x) { return g$((l+1))_$k(x) + g$((l+1))_$(( (k+1) % 100 ))(x); }"; fi
    done
  done
  echo 'int main(void) { int r = 0;'
  echo '#pragma omp target map(tofrom: r)'
  echo '  for (int k = 0; k < 1; k++) r = g0_0(1) + g0_50(1);'
  echo '  return r == 0; }'; } > dag.c

analysis() { "$OMPCC" --clang=clang-$V --flang=flang-new-$V -v --declare-target-check -fopenmp "$1" -o a.out 2>&1 \
  | sed -n 's/.*declare target analysis: \(.* ms\) (graph + phases).*/\1/p' | head -1; }

printf '%-22s %-44s %s\n' "input (LLVM $V)" "analysis (graph + phases)" "front end alone"
printf '%-22s %-44s %s ms (clang -fsyntax-only -ast-dump)\n' "chain.c depth 24" "$(analysis chain.c)" \
  "$(ms clang-$V -fopenmp -fsyntax-only -Xclang -ast-dump chain.c)"
printf '%-22s %-44s %s ms (flang -fc1 -emit-hlfir, its marking pass included)\n' "chain.f90 depth 24" "$(analysis chain.f90)" \
  "$(ms flang-new-$V -fc1 -fopenmp -emit-hlfir chain.f90 -o /dev/null)"
printf '%-22s %-44s %s ms (clang -fsyntax-only -ast-dump)\n' "dag.c 10000 functions" "$(analysis dag.c)" \
  "$(ms clang-$V -fopenmp -fsyntax-only -Xclang -ast-dump dag.c)"
echo "ordinary build of dag.c, without / with --declare-target-check:"
echo "  $(ms "$OMPCC" --clang=clang-$V -fopenmp dag.c -o a.out) ms / $(ms "$OMPCC" --clang=clang-$V -fopenmp --declare-target-check dag.c -o a.out) ms"
# Separate compilation: dag.c compiled with -c (its facts kept in dag.o), then dag.o linked.
"$OMPCC" --clang=clang-$V -fopenmp --declare-target-check -c dag.c -o dag.o >/dev/null 2>&1 || true
echo "dag.o from ompcc -c, linked: $("$OMPCC" --clang=clang-$V -v -fopenmp --declare-target-check dag.o -o a.out 2>&1 \
  | sed -n 's/.*declare target analysis: .*, \([0-9.]* ms\) (graph + phases); \(.*\)/analysis \1; \2/p' | head -1)"
# --gpu-check on the same DAG (the GPU device compile to IR, then the graph and its search).
echo "ordinary build of dag.c, without / with --gpu-check: $(ms "$OMPCC" --clang=clang-$V -fopenmp dag.c -o a.out) ms / $(ms "$OMPCC" --clang=clang-$V -fopenmp --gpu-check dag.c -o a.out) ms; $("$OMPCC" --clang=clang-$V -v -fopenmp --gpu-check dag.c -o a.out 2>&1 | sed -n 's/^# --gpu-check: //p' | head -1)"
