#!/usr/bin/env bash
# GPU tests and benchmarks on the device machine. Usage (from the repository root there):
#   bash device_carry/run.sh tests [gtest filter]   every GPU suite with TESSERA_REQUIRE_GPU=1
#   bash device_carry/run.sh bench                  bench decode bf16 batch 1/16/128 (+ --enforce-eager)
#   bash device_carry/run.sh qbench                 bench decode nvfp4 | fp8 | bf16
#   bash device_carry/run.sh kernels [args]         bench kernels
#   bash device_carry/run.sh cases FAMILIES [args]  bench kernels --cases (the conformance cases timed)
source "$(dirname "$0")/env.sh"
what="${1:-tests}"; shift || true
case "$what" in
  tests)
    filter="${1:-*}"
    rc=0
    for t in cuda_tests backend_ops_tests server_tests cli_tests; do
      extra=""
      # The suites' GPU tests (and the CPU ones that run the binary the GPU tests use); node is not
      # on the device machine, so the Node end-to-end tests stay out.
      [ "$t" = server_tests ] && extra="--gtest_filter=ServerCuda*:ServeSelfCheck*"
      [ "$t" = cli_tests ] && extra="--gtest_filter=SelfCheckCli*:Generate*:BenchKernels*:MakeCheckpoint*"
      [ "$filter" != "*" ] && extra="--gtest_filter=$filter"
      echo "== $t $extra"
      "$KIT/bin/$t" $extra --gtest_brief=1 > "$OUT/$t.log" 2>&1 || rc=1
      tail -4 "$OUT/$t.log"
    done
    exit $rc ;;
  bench)
    for e in "" "--enforce-eager"; do
      tessera bench decode --device cuda --synthetic kimi-k2.5 --layers 3 --batch 1,16,128 --steps 20 $e 2>&1 | tail -8
    done ;;
  qbench)
    for w in nvfp4 fp8 bf16; do
      tessera bench decode --device cuda --synthetic kimi-k2.5 --weights $w --layers 3 --batch 1,16,128 --steps 20 2>&1 | tail -8
    done ;;
  kernels)
    tessera bench kernels "$@" 2>&1 | tail -60 ;;
  cases)
    tessera bench kernels --iterations 20 --cases "$@" 2>&1 | tee "$OUT/cases.log" | tail -40 ;;
  *) echo "run.sh: unknown '$what'"; exit 2 ;;
esac
