#!/usr/bin/env bash
# GPU tests and benchmarks on the device machine. Usage (from the repository root there):
#   bash device_carry/run.sh tests [gtest filter]   the GPU suites (cuda_tests, server, CLI) with TESSERA_REQUIRE_GPU=1
#   bash device_carry/run.sh conformance [moe]      the op conformance cases on CUDA against the CPU, then the MoE
#                                                   cases with the non-default expert kernels (a second device call)
#   bash device_carry/run.sh bench                  bench decode bf16 batch 1/16/128 (+ --enforce-eager)
#   bash device_carry/run.sh qbench                 bench decode nvfp4 | fp8 | bf16
#   bash device_carry/run.sh kernels [args]         bench kernels
#   bash device_carry/run.sh cases FAMILIES [args]  bench kernels --cases (the conformance cases timed)
#   bash device_carry/run.sh comm                   the collectives' GPU tests and bench comm on this machine's GPUs
#   bash device_carry/run.sh itl                    ITL with Poisson arrivals, the step pacer and the GEMM algorithm buckets on and off (issue 19)
#   bash device_carry/run.sh prefetch               bench decode nvfp4 | fp8 with TESSERA_EXPERT_PREFETCH 0 / 4 / 8 / 16
#   bash device_carry/run.sh ring                   the ring kernels (TESSERA_EXPERT_RING, TESSERA_EXPERT_WEIGHTS_A): MoE cases, bench A/B nvfp4 | fp8
#   bash device_carry/run.sh prefill                bench prefill on issue 19's checkpoint, 2048- and 8192-token steps, and --trace
#   bash device_carry/run.sh offline                bench offline at batch 1 and 128 on issue 19's checkpoint, and batch 1 --trace
#   bash device_carry/run.sh prefill-ratio          bench prefill of one Kimi-K2.5 MoE layer, NVFP4 experts against bf16 (issue 15)
#   bash device_carry/run.sh verify [serve|dense]   what a kernel change owes before it is merged or made a default:
#                                                   the golden fixtures, the quantized cases, the quantized MoE cases in
#                                                   every kernel and MMA orientation (and the shared expert folded) (`verify dense`: not the MoE
#                                                   cases); `verify serve`: serve_check.sh on
#                                                   real-size NVFP4 and FP8 checkpoints (a second device call: each
#                                                   part takes minutes)
#   bash device_carry/run.sh moe-bench [ENV...]     the bf16 grouped expert kernels alone (bench kernels) per environment, then ncu
#   bash device_carry/run.sh wa                     the MoE cases and goldens with the weights-as-A switches (pair
#                                                   groups off, three blocks on), then bench offline and kernel rows A/B
#   bash device_carry/run.sh moe-tiles              TESSERA_MOE_GROUPED_TILES 1/2/4: bench offline at 128 concurrent on issue 19's
#                                                   checkpoint (64 experts), alternated, and with prompts arriving
#   bash device_carry/run.sh pacer-ab               the pacer's backlog share and clustered sampling against the baseline
#                                                   (and TESSERA_SAMPLE_CLUSTERS=0), same GPU
#   bash device_carry/run.sh fold                   TESSERA_SHARED_EXPERT_FOLD=1: goldens, quantized MoE cases, bench decode fp8 A/B
#   bash device_carry/run.sh linear                 the dense quantized projections' cases (bench kernels --filter linear,
#                                                   Kimi-K2.5 and DeepSeek-V3 shapes) with TESSERA_LINEAR_RING=0 and 1,
#                                                   alternated twice, then bench decode fp8 | nvfp4 with each
#   bash device_carry/run.sh ncu [kernel case]      Nsight Compute sections of conformance cases' kernels (default: the
#                                                   FP8 o_proj on the matrix-vector kernel at 1 token, the ring at 4)
#   bash device_carry/run.sh prefill-ab             issue 19's prefill against device_carry/baseline.tar.xz: bench prefill
#                                                   (8192-token steps) alternated twice, bench offline's 4096-token
#                                                   prefill, the trace of an 8192-token prompt
#   bash device_carry/run.sh step-size              --max-num-batched-tokens 2048 against 8192: fresh prompts' TTFT, and ITL
#                                                   at 128 concurrent with short and long prompts arriving
#   bash device_carry/run.sh mla-ncu                MLA decode at batch 1 x 32k (8 and 64 heads): kernel rows, then ncu-src
#   bash device_carry/run.sh mla-step               MLA decode at batch 1 inside a decode step (bench decode --trace, 1k / 32k context)
#   bash device_carry/run.sh ncu-src NAME KERNEL_REGEX COUNT ARGS...  Nsight Compute's full set and per-instruction
#                                                   stalls of `tessera ARGS...` into $OUT/NAME*
#   bash device_carry/run.sh ncu-prefill [kernel]   Nsight Compute on the MLA prefill attention kernel (wgmma by default),
#                                                   64 heads, 8k context: its stall reasons and pipe use
#   bash device_carry/run.sh pairs-priorities       TESSERA_MLA_WGMMA_PAIRS (GPU tests, batch-1 rows, the 32k step) and
#                                                   TESSERA_STREAM_PRIORITIES (bench decode b1 / 16, traces), off / on
#   bash device_carry/run.sh ab [weights...]        this tree against device_carry/baseline.tar.xz (make_build_kit.sh
#                                                   --baseline REV), built here: bench decode alternated twice, then the
#                                                   MoE kernel cases of both
source "$(dirname "$0")/env.sh"
what="${1:-tests}"; shift || true
# Issue 19's checkpoint shape (1 dense + 3 MoE layers, 64 experts, hidden 7168, 64 heads; 23.5 GB),
# written once per machine; prints its directory.
issue19_checkpoint() {
  local dir=/tmp/ck-dsv3-4l
  [ -d "$dir" ] || tessera make-checkpoint --like deepseek-v3-bf16 --layers 4 --experts 64 --vocab 163840 \
    --heads 64 --first-dense 1 --tokenizer "$TESSERA_FIXTURES/tokenizers/deepseek-v3" --out "$dir" 2>&1 | tail -2 >&2
  echo "$dir"
}
# The baseline's binaries (device_carry/baseline.tar.xz, make_build_kit.sh --baseline REV) in a kit
# of their own: a second build directory, about as long as the first build. Then tessera_of base|new.
base=/tmp/tessera-base
baseline_kit() {
  if [ ! -f "$base/kit/built" ]; then
    rm -rf "$base" && mkdir -p "$base/src" && tar xJf device_carry/baseline.tar.xz -C "$base/src"
    TESSERA_SRC="$base/src" TESSERA_BUILD_DIR="$base/build" TESSERA_KIT="$base/kit" \
      bash "$(dirname "$0")/build.sh" tessera > "$OUT/baseline_build.log" 2>&1 || { tail -20 "$OUT/baseline_build.log"; return 1; }
  fi
  echo "baseline $(cat device_carry/baseline.rev 2>/dev/null || echo '?') against this tree"
}
tessera_of() { [ "$1" = base ] && echo "$base/kit/bin/tessera" || echo "$KIT/bin/tessera"; }
# tessera of side base|new under `timeout SECONDS` (0: none), the baseline kit's libraries first.
tessera_side() {
  local side=$1 seconds=$2
  shift 2
  LD_LIBRARY_PATH="$base/kit/lib:$LD_LIBRARY_PATH" timeout "$seconds" "$(tessera_of "$side")" "$@"
}
# A suite's summary and its first failures.
show() { tail -2 "$1"; grep -A6 "Failure" "$1" | head -14 || true; }
case "$what" in
  tests)
    # The GPU suites but the op conformance cases (those: `run.sh conformance`): cuda_tests and the
    # server's and CLI's GPU tests, ~150 s on an H100 (one device call).
    filter="${1:-*}"
    rc=0
    for t in cuda_tests server_tests cli_tests; do
      extra=""
      # The suites' GPU tests (and the CPU ones that run the binary the GPU tests use); node is not
      # on the device machine, so the Node end-to-end tests stay out.
      [ "$t" = server_tests ] && extra="--gtest_filter=ServerCuda*:ServeSelfCheck*"
      [ "$t" = cli_tests ] && extra="--gtest_filter=SelfCheckCli*:Generate*:BenchKernels*:MakeCheckpoint*"
      [ "$filter" != "*" ] && extra="--gtest_filter=$filter"
      echo "== $t $extra"
      "$KIT/bin/$t" $extra --gtest_brief=1 > "$OUT/$t.log" 2>&1 || rc=1
      show "$OUT/$t.log"
    done
    exit $rc ;;
  conformance)
    # Every op conformance case on the CUDA backend against the CPU (CudaAgainstCpu only: the CPU's
    # own cases need no GPU and CI runs them), then the MoE cases with the non-default expert kernels.
    # `conformance moe` runs only the MoE parts. Each part under a timeout, so one call returns.
    rc=0
    if [ "${1:-}" != moe ]; then
      echo "== backend_ops_tests *CudaAgainstCpu* (defaults)"
      timeout 400 "$KIT/bin/backend_ops_tests" --gtest_filter='*CudaAgainstCpu*' --gtest_brief=1 \
        > "$OUT/conformance.log" 2>&1 || rc=1
      show "$OUT/conformance.log"
    fi
    # The register-streaming expert kernels (the ring kernels are the default on sm_90a), and both
    # families with the activations as the MMA's A operand (the weights are A by default).
    for v in "0 1" "1 0" "0 0"; do
      set -- $v
      echo "== backend_ops_tests *CudaAgainstCpu*moe* with TESSERA_EXPERT_RING=$1 TESSERA_EXPERT_WEIGHTS_A=$2"
      TESSERA_EXPERT_RING=$1 TESSERA_EXPERT_WEIGHTS_A=$2 timeout 150 "$KIT/bin/backend_ops_tests" \
        --gtest_filter='*CudaAgainstCpu*moe*' --gtest_brief=1 > "$OUT/moe_cases_$1$2.log" 2>&1 || rc=1
      show "$OUT/moe_cases_$1$2.log"
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
  prefetch)
    for w in nvfp4 fp8; do
      for p in 0 4 8 16 0; do
        echo "== $w, TESSERA_EXPERT_PREFETCH=$p"
        TESSERA_EXPERT_PREFETCH=$p tessera bench decode --device cuda --synthetic kimi-k2.5 --weights $w --layers 3 \
          --batch 1,16,128 --steps 20 2>&1 | tail -5
      done
    done ;;
  ring)
    # The ring kernels (TESSERA_EXPERT_RING=1) against the register-streaming ones: correctness
    # on the MoE cases, then bench decode alternated twice.
    TESSERA_EXPERT_RING=1 "$KIT/bin/backend_ops_tests" --gtest_filter='*moe*' --gtest_brief=1 > "$OUT/ring_cases.log" 2>&1
    tail -4 "$OUT/ring_cases.log"
    for w in nvfp4 fp8; do
      for r in 0 1 0 1; do
        echo "== $w, TESSERA_EXPERT_RING=$r"
        TESSERA_EXPERT_RING=$r TESSERA_EXPERT_WEIGHTS_A=1 tessera bench decode --device cuda --synthetic kimi-k2.5 --weights $w --layers 3 \
          --batch 1,16,128 --steps 20 2>&1 | tail -5
      done
    done
    TESSERA_EXPERT_RING=1 tessera bench kernels --iterations 20 --cases kimi-k2.5,deepseek-v3 --filter moe_experts 2>&1 \
      | tail -24 ;;
  kernels)
    tessera bench kernels "$@" 2>&1 | tail -60 ;;
  cases)
    tessera bench kernels --iterations 20 --cases "$@" 2>&1 | tee "$OUT/cases.log" | tail -40 ;;
  comm)
    # One test a process, each with its own deadline and its name in the log, so that a hang (session
    # 20: the filtered run as one process never returned on the H200) names the test that hangs.
    rc=0
    tests=$("$KIT/bin/cuda_tests" --gtest_list_tests --gtest_filter='*PeerGroup*:GpuRankGroup*:Nccl*' |
      awk '/^[^ ]/{s=$1} /^  /{print s $1}')
    for t in $tests; do
      log="$OUT/comm_$(echo "$t" | tr '/' '_').log"
      t0=$(date +%s)
      timeout 90 "$KIT/bin/cuda_tests" --gtest_filter="$t" > "$log" 2>&1 && r=0 || r=$?
      [ $r -eq 0 ] || rc=1
      echo "$t: rc $r in $(( $(date +%s) - t0 )) s$([ $r -eq 124 ] && echo ' (timed out)')"
      [ $r -eq 0 ] || { grep -E "Failure|error|Expected|Which is" "$log" | head -6; } || true
      # Ranks sharing the GPU wait for each other's kernels: with more streams than the device's
      # hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, default 8) two ranks' kernels can queue behind
      # each other. A failure is tried again with 32 queues, to tell that apart.
      if [ $r -ne 0 ]; then
        CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 90 "$KIT/bin/cuda_tests" --gtest_filter="$t" > "$log.32" 2>&1 && r=0 || r=$?
        echo "  again with CUDA_DEVICE_MAX_CONNECTIONS=32: rc $r"
      fi
      { grep -E "measured|one-shot|NCCL " "$log" | head -8; } || true
    done
    timeout 120 tessera bench comm --device cuda --sizes 4KiB,28KiB,256KiB,1MiB,4MiB 2>&1 | tail -20 || rc=1
    exit $rc ;;
  itl)
    # Issue 19's ITL goal (p99 <= 2x p50 at 128 concurrent with arrivals): the step pacer off / on,
    # and the cuBLASLt algorithm buckets off / on (a mixed step's token count is new almost every
    # step, so each of its GEMMs asked the heuristic again: part of the mixed step's fixed cost).
    dir=$(issue19_checkpoint)
    for rate in 30 45; do
      for stretch in 1 1.8; do
        for b in 0 1; do
          echo "== --max-step-stretch $stretch, TESSERA_GEMM_ALGO_BUCKETS=$b, Poisson $rate req/s"
          TESSERA_GEMM_ALGO_BUCKETS=$b tessera bench offline --device cuda --model "$dir" --kv-cache-bytes 16GiB \
            --input-len 128 --output-len 256 --num-requests 512 --concurrency 128 --request-rate $rate \
            --skip-self-check --max-step-stretch $stretch 2>&1 | grep -E "output tokens/s|TTFT|ITL" || true
        done
      done
    done ;;
  prefill)
    # Issue 19: bench prefill on the issue's checkpoint shape (1 dense + 3 MoE layers, 64 experts, 64
    # heads; 23.5 GB), at the default step size and at 8192-token steps, split precision and the
    # 128-row attention blocks against the default (auto, 64 rows), then where a 4096- and an 8192-token prompt's time goes (--trace:
    # kernels summed by name, and the time none ran).
    dir=$(issue19_checkpoint)
    for step in 2048 8192; do
      echo "== bench prefill, --max-num-batched-tokens $step"
      tessera bench prefill --device cuda --model "$dir" --prompt-lens 1024,4096,8192,16384,65536 --repeats 3 \
        --max-num-batched-tokens $step --skip-self-check 2>&1 | tail -9 || true
    done
    for v in "split 64" "auto 128"; do
      set -- $v
      echo "== bench prefill, --max-num-batched-tokens 8192, TESSERA_MLA_PREFILL_PRECISION=$1 TESSERA_MLA_PREFILL_QUERY_ROWS=$2"
      TESSERA_MLA_PREFILL_PRECISION=$1 TESSERA_MLA_PREFILL_QUERY_ROWS=$2 tessera bench prefill --device cuda --model "$dir" \
        --prompt-lens 1024,4096,8192,16384,65536 --repeats 3 --max-num-batched-tokens 8192 --skip-self-check 2>&1 \
        | tail -9 || true
    done
    echo "== bench prefill --trace, --max-num-batched-tokens 8192"
    tessera bench prefill --device cuda --model "$dir" --prompt-lens 4096,8192 --repeats 1 \
      --max-num-batched-tokens 8192 --skip-self-check --trace > "$OUT/prefill_trace.log" 2>&1 || true
    sed -n '/kernels of one/,$p' "$OUT/prefill_trace.log" | cut -c1-170 ;;
  offline)
    # Issue 19's decode goals end to end: bench offline at batch 1 and 128 on its checkpoint, then
    # batch 1 again with --trace (the time no kernel ran between the kernels: the host's share).
    dir=$(issue19_checkpoint)
    for c in 1 128; do
      echo "== bench offline, concurrency $c"
      tessera bench offline --device cuda --model "$dir" --kv-cache-bytes 16GiB --input-len 128 --output-len 128 \
        --num-requests $((c == 1 ? 4 : 256)) --concurrency $c --skip-self-check 2>&1 \
        | grep -E "output tokens/s|TTFT|ITL|engine:|decode graphs" || true
    done
    echo "== bench offline --trace, concurrency 1"
    tessera bench offline --device cuda --model "$dir" --kv-cache-bytes 16GiB --input-len 128 --output-len 128 \
      --num-requests 2 --concurrency 1 --skip-self-check --trace > "$OUT/offline_trace.log" 2>&1 || true
    grep -E "ITL" "$OUT/offline_trace.log" || true
    sed -n '/kernels of the run/,$p' "$OUT/offline_trace.log" | cut -c1-170
    # Batch 128 (issue 19: >= 12,600 tok/s; a decode step of this checkpoint reads ~21 GB, ~5 ms at
    # the copy rate, against ~13 ms measured): where a step's time goes, 128 sequences decoding.
    echo "== bench offline --trace, concurrency 128"
    tessera bench offline --device cuda --model "$dir" --kv-cache-bytes 16GiB --input-len 128 --output-len 64 \
      --num-requests 128 --concurrency 128 --skip-self-check --trace > "$OUT/offline_trace128.log" 2>&1 || true
    grep -E "ITL|output tokens/s" "$OUT/offline_trace128.log" || true
    sed -n '/kernels of the run/,$p' "$OUT/offline_trace128.log" | head -40 | cut -c1-170 ;;
  prefill-ratio)
    # Issue 15: prefill on NVFP4 routed experts against the same shapes in bf16 (goal >= 80%). One
    # Kimi-K2.5 MoE layer with all 384 experts (the 61-layer model's layers but one are MoE): the
    # bf16 twin is ~39 GB, the NVFP4 one ~15 GB, written one at a time (the machine's disk is 64 GB).
    for w in nvfp4 bf16; do
      dir=/tmp/ck-ratio-$w
      like="--like kimi-k2.5-nvfp4"
      [ $w = bf16 ] && like="--like deepseek-v3-bf16 --heads 64 --vocab 163840"
      rm -rf /tmp/ck-ratio-*
      tessera make-checkpoint $like --layers 1 --first-dense 0 --experts 384 \
        --tokenizer "$TESSERA_FIXTURES/tokenizers/deepseek-v3" --out "$dir" 2>&1 | tail -1
      echo "== bench prefill, $w routed experts"
      tessera bench prefill --device cuda --model "$dir" --prompt-lens 1024,4096,8192 --repeats 3 \
        --skip-self-check 2>&1 | tail -8 || true
    done
    rm -rf /tmp/ck-ratio-* ;;
  verify)
    rc=0
    if [ "${1:-}" = serve ]; then
      for ck in nvfp4 dsv3-fp8; do
        echo "== serve_check $ck"
        timeout 280 bash "$(dirname "$0")/serve_check.sh" $ck > "$OUT/verify_serve_$ck.log" 2>&1 || rc=1
        grep -E "ready after|choices|serve exit|FAILED|exited|plan: memory|MiB" "$OUT/verify_serve_$ck.log" | cut -c1-240 || true
      done
      exit $rc
    fi
    echo "== goldens and fixture models"
    timeout 150 "$KIT/bin/cuda_tests" --gtest_filter='*CudaGolden*:*FixtureModels*' --gtest_brief=1 \
      > "$OUT/verify_goldens.log" 2>&1 || rc=1
    tail -3 "$OUT/verify_goldens.log"
    list=$("$KIT/bin/backend_ops_tests" --gtest_list_tests | awk '/^[^ ]/{s=$1} /^  /{print s $1}')
    quant=$(echo "$list" | grep -iE "CudaAgainstCpu.*(nvfp4|fp8|quant)" | grep -viE "moe" | tr '\n' ':')
    moe=$(echo "$list" | grep -iE "CudaAgainstCpu.*moe" | grep -iE "nvfp4|fp8" | tr '\n' ':')
    echo "== quantized cases but MoE"
    timeout 120 "$KIT/bin/backend_ops_tests" --gtest_filter="$quant" --gtest_brief=1 > "$OUT/verify_quant.log" 2>&1 || rc=1
    show "$OUT/verify_quant.log"
    echo "== quantized linear_pair cases, TESSERA_QUANT_GEMV_PAIR=0 (two launches; one is the default)"
    pair=$(echo "$list" | grep -iE "CudaAgainstCpu.*linear_pair.*(nvfp4|fp8)" | tr '\n' ':')
    TESSERA_QUANT_GEMV_PAIR=0 timeout 60 "$KIT/bin/backend_ops_tests" --gtest_filter="$pair" --gtest_brief=1 \
      > "$OUT/verify_pair.log" 2>&1 || rc=1
    show "$OUT/verify_pair.log"
    [ "${1:-}" = dense ] && exit $rc  # a change to the dense projections only
    # The third value: TESSERA_SHARED_EXPERT_FOLD (the FP8 shared expert in the routed kernels).
    for v in "1 1 0" "0 1 0" "1 0 0" "0 0 0" "1 1 1" "0 1 1"; do
      set -- $v
      echo "== quantized MoE cases, TESSERA_EXPERT_RING=$1 TESSERA_EXPERT_WEIGHTS_A=$2 TESSERA_SHARED_EXPERT_FOLD=$3"
      TESSERA_EXPERT_RING=$1 TESSERA_EXPERT_WEIGHTS_A=$2 TESSERA_SHARED_EXPERT_FOLD=$3 timeout 100 \
        "$KIT/bin/backend_ops_tests" --gtest_filter="$moe" --gtest_brief=1 > "$OUT/verify_moe_$1$2$3.log" 2>&1 || rc=1
      show "$OUT/verify_moe_$1$2$3.log"
    done
    exit $rc ;;
  moe-bench)
    # The bf16 grouped routed-expert kernels alone (bench kernels --filter "moe grouped": 64 and 384
    # experts and the shared expert at 16 / 128 / 256 tokens) for each environment given (default:
    # TESSERA_MOE_GROUPED_WA=0 and the defaults; "-" is the defaults), then Nsight Compute on the
    # kernels of 64 experts x 128 tokens under the last one (why they stream at the rate they do).
    [ $# -gt 0 ] || set -- TESSERA_MOE_GROUPED_WA=0 -
    for v in "$@"; do
      [ "$v" = - ] && v=""
      echo "== bench kernels --filter 'moe grouped' ${v:-(defaults)}"
      env $v timeout 300 tessera bench kernels --iterations 10 --filter "moe grouped" 2>&1 | grep -E "^moe|ceiling|read-only" || true
    done
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    [ -n "$NCU" ] || { echo "no ncu on this machine"; exit 0; }
    for v in "$@"; do
      [ "$v" = - ] && v=""
      echo "== ncu, 64 experts x 128 tokens, ${v:-(defaults)}"
      env $v timeout 300 "$NCU" -k "regex:expert_project|expert_wa" -c 3 --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
        --section SchedulerStats tessera bench kernels --iterations 1 --filter "moe grouped bf16 e64 t128" \
        > "$OUT/ncu_moe.log" 2>&1 || true
      grep -E "expert_|DRAM Throughput|L1/TEX Cache Throughput|Duration|Registers Per|Achieved Occupancy|Stall|Wavefronts|Bank|Eligible|L1/TEX Hit|L2 Hit|ERR|rror" \
        "$OUT/ncu_moe.log" | cut -c1-150 | head -60 || tail -5 "$OUT/ncu_moe.log"
    done ;;
  wa)
    # The bf16 routed experts with the weights as the MMA's A operand (TESSERA_MOE_GROUPED_WA) and
    # its pair groups (TESSERA_MOE_GROUPED_WA_PAIR_GROUPS), both default since the session of
    # 2026-12-06, seventh (the pair groups' goldens, engine and graphs not yet run), and the
    # experiment TESSERA_MOE_GROUPED_WA_THREE_BLOCKS=1: every MoE case and the goldens, engine and
    # graphs with pair groups off and with three blocks on; then bench offline at 128 concurrent on
    # issue 19's checkpoint and the kernel rows of 64 experts x 128 tokens and of the shared expert
    # alone, for WA off, the default and each switch.
    rc=0
    for v in TESSERA_MOE_GROUPED_WA_PAIR_GROUPS=0 TESSERA_MOE_GROUPED_WA_THREE_BLOCKS=1; do
      echo "== MoE cases, $v"
      env $v timeout 200 "$KIT/bin/backend_ops_tests" --gtest_filter='*moe*' --gtest_brief=1 > "$OUT/wa_moe_$v.log" 2>&1 || rc=1
      show "$OUT/wa_moe_$v.log"
      echo "== goldens, fixture models, engine, graphs, $v"
      env $v timeout 120 "$KIT/bin/cuda_tests" --gtest_filter='*Engine*:*CudaGolden*:*FixtureModels*:*StepGraph*' \
        --gtest_brief=1 > "$OUT/wa_tests_$v.log" 2>&1 || rc=1
      show "$OUT/wa_tests_$v.log"
    done
    dir=$(issue19_checkpoint)
    # (TESSERA_SHARED_EXPERT_STREAM=0: the shared expert as one more expert of the routed launch
    # instead of alone on the second stream, 378 us a layer at 128 tokens there.)
    for v in TESSERA_MOE_GROUPED_WA=0 - TESSERA_MOE_GROUPED_WA_PAIR_GROUPS=0 TESSERA_MOE_GROUPED_WA_THREE_BLOCKS=1 \
      TESSERA_SHARED_EXPERT_STREAM=0 TESSERA_MOE_GROUPED_WA=0 - TESSERA_MOE_GROUPED_WA_PAIR_GROUPS=0 \
      TESSERA_MOE_GROUPED_WA_THREE_BLOCKS=1 TESSERA_SHARED_EXPERT_STREAM=0; do
      [ "$v" = - ] && v=""
      echo "== ${v:-(defaults)}, 128 concurrent, 16-token prompts"
      env $v timeout 100 tessera bench offline --device cuda --model "$dir" \
        --kv-cache-bytes 16GiB --input-len 16 --output-len 128 --num-requests 128 --concurrency 128 --skip-self-check 2>&1 |
        grep -E "output tokens/s|ITL|a decode step" | cut -c1-200 || true
    done
    for v in TESSERA_MOE_GROUPED_WA=0 - TESSERA_MOE_GROUPED_WA_PAIR_GROUPS=0 TESSERA_MOE_GROUPED_WA_THREE_BLOCKS=1; do
      [ "$v" = - ] && v=""
      echo "== bench kernels, ${v:-(defaults)}"
      for f in "moe grouped bf16 e64" "moe grouped bf16 shared"; do
        env $v timeout 60 tessera bench kernels --iterations 10 --filter "$f" 2>&1 | grep -E "^moe" || true
      done
    done
    exit $rc ;;
  moe-tiles)
    # TESSERA_MOE_GROUPED_TILES 1 / 2 / 4 (2026-12-06, fifth session): issue 19's checkpoint has 64
    # experts, so batch 128 averages 16 pairs an expert and with 1 tile an expert of 17-32 streams
    # its weights twice. bench offline at 128 concurrent, alternated twice; then the ITL run with
    # 128-token prompts arriving (mixed steps of ~256 tokens: ~32 pairs an expert).
    dir=$(issue19_checkpoint)
    for n in 1 2 4 1 2 4; do
      echo "== TESSERA_MOE_GROUPED_TILES=$n, 128 concurrent"
      TESSERA_MOE_GROUPED_TILES=$n timeout 150 tessera bench offline --device cuda --model "$dir" --kv-cache-bytes 16GiB \
        --input-len 128 --output-len 256 --num-requests 256 --concurrency 128 --skip-self-check 2>&1 |
        grep -E "output tokens/s|ITL" | cut -c1-110 || true
    done
    # Last, the grouped kernels for every step size (--kernels moe=grouped; by default steps over 256
    # tokens, as mixed steps of 128 decodes and a prompt are, take the per-expert GEMMs after reading
    # the routing back to the host: a suspect for a mixed step's ~3 ms fixed cost).
    for v in "1 auto" "4 auto" "4 moe=grouped"; do
      set -- $v
      echo "== TESSERA_MOE_GROUPED_TILES=$1 TESSERA_KERNELS=$2, 128 concurrent, 128-token prompts arriving at 20 req/s"
      kernels=""
      [ "$2" = auto ] || kernels="$2"
      TESSERA_MOE_GROUPED_TILES=$1 TESSERA_KERNELS="$kernels" timeout 150 tessera bench offline --device cuda \
        --model "$dir" --kv-cache-bytes 16GiB --input-len 128 --output-len 256 --num-requests 384 --concurrency 128 \
        --request-rate 20 --skip-self-check 2>&1 | grep -E "output tokens/s|TTFT|ITL|engine:|decode graphs" | cut -c1-110 || true
    done ;;
  pacer-ab)
    # The step pacer's backlog share and the clustered sampling against the baseline
    # (device_carry/baseline.tar.xz, 8b11d7c) on the same GPU: 128 concurrent with 128-token prompts
    # arriving at 20 req/s, alternated twice, this tree also with TESSERA_SAMPLE_CLUSTERS=0 (on an
    # H100 this tree's ITL p50 was 15.3-15.8 ms against the baseline's 14.3 with the backlog share
    # widening 0-2 steps of ~1330: which change costs it?), then 2048-token prompts once each (where
    # the baseline starved prefill: 644 tok/s, TTFT p50 47 s).
    baseline_kit || exit 1
    dir=$(issue19_checkpoint)
    for len in 128 128 2048; do
      for side in base new new-1block; do
        [ $len = 2048 ] && [ $side = new-1block ] && continue
        echo "== $side: 128 concurrent, $len-token prompts arriving at 20 req/s"
        clusters=1; [ $side = new-1block ] && clusters=0
        TESSERA_SAMPLE_CLUSTERS=$clusters tessera_side ${side%-1block} 160 bench offline --device cuda --model "$dir" \
          --kv-cache-bytes 16GiB --input-len $len --output-len 256 --num-requests 384 --concurrency 128 \
          --request-rate 20 --skip-self-check 2>&1 | grep -E "output tokens/s|TTFT|ITL|engine:|decode graphs" | cut -c1-110 || echo "(no result in 160 s)"
      done
    done
    # Where a step's time goes on each side (128-token prompts): sample_kernel's time a call, the time
    # no kernel ran (the host's share), the largest kernels.
    for side in base new; do
      echo "== $side: --trace, 128-token prompts arriving at 20 req/s"
      tessera_side $side 120 bench offline --device cuda \
        --model "$dir" --kv-cache-bytes 16GiB --input-len 128 --output-len 256 --num-requests 192 --concurrency 128 \
        --request-rate 20 --skip-self-check --trace > "$OUT/pacer_ab_trace_$side.log" 2>&1 || true
      grep -E "^ITL" "$OUT/pacer_ab_trace_$side.log" || true
      grep -o "kernels running.*" "$OUT/pacer_ab_trace_$side.log" | head -1 | cut -c1-120
      sed -n '/kernels of the run/,$p' "$OUT/pacer_ab_trace_$side.log" | sed -n '2,8p;/sample_kernel/p' | cut -c1-110
    done ;;
  fold)
    # The FP8 shared expert in the routed experts' kernels (TESSERA_SHARED_EXPERT_FOLD=1) against
    # after them: the goldens and the quantized MoE cases with it on, then bench decode fp8
    # alternated twice, and the batch-1 trace of each.
    rc=0
    echo "== goldens and fixture models, TESSERA_SHARED_EXPERT_FOLD=1"
    TESSERA_SHARED_EXPERT_FOLD=1 timeout 150 "$KIT/bin/cuda_tests" --gtest_filter='*CudaGolden*:*FixtureModels*' \
      --gtest_brief=1 > "$OUT/fold_goldens.log" 2>&1 || rc=1
    show "$OUT/fold_goldens.log"
    list=$("$KIT/bin/backend_ops_tests" --gtest_list_tests | awk '/^[^ ]/{s=$1} /^  /{print s $1}')
    moe=$(echo "$list" | grep -iE "CudaAgainstCpu.*moe" | grep -iE "nvfp4|fp8" | tr '\n' ':')
    echo "== quantized MoE cases, TESSERA_SHARED_EXPERT_FOLD=1"
    TESSERA_SHARED_EXPERT_FOLD=1 timeout 100 "$KIT/bin/backend_ops_tests" --gtest_filter="$moe" --gtest_brief=1 \
      > "$OUT/fold_moe.log" 2>&1 || rc=1
    show "$OUT/fold_moe.log"
    for round in 1 2; do
      for f in 0 1; do
        echo "== fp8, TESSERA_SHARED_EXPERT_FOLD=$f (round $round)"
        TESSERA_SHARED_EXPERT_FOLD=$f tessera bench decode --device cuda --synthetic kimi-k2.5 --weights fp8 --layers 3 \
          --batch 1,16,128 --steps 20 2>&1 | grep -E "^ +(1|16|128) " || true
      done
    done
    for f in 0 1; do
      echo "== fp8 batch 1 trace, TESSERA_SHARED_EXPERT_FOLD=$f"
      TESSERA_SHARED_EXPERT_FOLD=$f tessera bench decode --device cuda --synthetic kimi-k2.5 --weights fp8 --layers 3 \
        --batch 1 --steps 20 --trace > "$OUT/fold_trace_$f.log" 2>&1 || true
      tail -40 "$OUT/fold_trace_$f.log"
    done
    exit $rc ;;
  linear)
    for round in 1 2; do
      for r in 0 1; do
        echo "== linear cases, TESSERA_LINEAR_RING=$r (round $round)"
        TESSERA_LINEAR_RING=$r tessera bench kernels --iterations 20 --cases deepseek-v3,kimi-k2.5 --filter linear --device-clock \
          > "$OUT/linear_${r}_$round.log" 2>&1
        grep -E "fp8|nvfp4" "$OUT/linear_${r}_$round.log" | grep -vE "ragged" | head -40 || tail -3 "$OUT/linear_${r}_$round.log"
      done
    done
    for w in fp8 nvfp4; do
      for r in 0 1; do
        echo "== $w, TESSERA_LINEAR_RING=$r"
        TESSERA_LINEAR_RING=$r tessera bench decode --device cuda --synthetic kimi-k2.5 --weights $w --layers 3 \
          --batch 1,16,128 --steps 20 2>&1 | grep -E "^ +(1|16|128) " || true
      done
    done ;;
  ncu)
    # Nsight Compute on the kernels of conformance cases (where the machine has ncu and lets it read
    # the counters): why a kernel streams at the rate it does. Default: DeepSeek-V3's FP8 o_proj on
    # the matrix-vector kernel at one token and on the dense ring at four, at 45% and 55% of copy
    # bandwidth (docs/PERFORMANCE.md). Arguments: a kernel regex and a case filter, run once.
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    [ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
    if [ $# -ge 2 ]; then runs=("$1;$2"); else
      runs=("quant_gemv_kernel;fp8-block o_proj 1x" "quant_linear_ring_kernel;fp8-block o_proj 4x"); fi
    i=0
    for r in "${runs[@]}"; do
      kernel="${r%%;*}"; filter="${r#*;}"; i=$((i + 1))
      echo "== $kernel on $filter"
      timeout 200 "$NCU" -k "regex:$kernel" -c 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis \
        tessera bench kernels --iterations 2 --cases deepseek-v3 --filter "$filter" > "$OUT/ncu_$i.log" 2>&1
      grep -E "Throughput|Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|Stall|Waves|ERR|rror" \
        "$OUT/ncu_$i.log" | head -40 || tail -5 "$OUT/ncu_$i.log"
    done ;;
  step-size)
    # --max-num-batched-tokens 2048 (the default) against 8192 on issue 19's checkpoint: prefill of
    # fresh 4096- and 8192-token prompts one at a time (TTFT), then ITL at 128 concurrent with
    # Poisson arrivals of 128-token prompts, and of 2048-token prompts (where a step's prefill share
    # can stall the decodes beside it); the pacer at its default. Decides the default step size.
    dir=$(issue19_checkpoint)
    for step in 2048 8192; do
      for len in 4096 8192; do
        echo "== --max-num-batched-tokens $step, one $len-token prompt at a time"
        timeout 90 tessera bench offline --device cuda --model "$dir" --kv-cache-bytes 16GiB --input-len $len \
          --output-len 1 --num-requests 6 --concurrency 1 --max-num-batched-tokens $step --skip-self-check 2>&1 |
          grep -E "TTFT" || true
      done
      for len in 128 2048; do
        echo "== --max-num-batched-tokens $step, 128 concurrent, $len-token prompts arriving at 20 req/s"
        timeout 150 tessera bench offline --device cuda --model "$dir" --kv-cache-bytes 16GiB --input-len $len \
          --output-len 256 --num-requests 384 --concurrency 128 --request-rate 20 --max-num-batched-tokens $step \
          --skip-self-check 2>&1 | grep -E "output tokens/s|TTFT|ITL" || true
      done
    done ;;
  mla-ncu)
    # Issue 19's MLA decode at batch 1 and 32k context: the kernel rows (every split count), then
    # ncu-src on the attention and combine kernels the policy picks for 8 heads (KV-major) and 64
    # heads (wgmma).
    tessera bench kernels --iterations 50 --filter "mla_decode" --batch 1 --heads 8 --heads 64 --context 32768 2>&1 |
      grep -E "ceiling|read-only|mla_decode (kvmajor|wgmma) " || true
    for r in "8;kvmajor" "64;wgmma"; do
      h="${r%%;*}"; k="${r#*;}"
      bash "$0" ncu-src "mla_$k" "attend|combine" 2 bench kernels --iterations 1 --filter "mla_decode $k h$h b1 ctx32768" \
        --batch 1 --heads "$h" --context 32768
    done ;;
  mla-step)
    # Issue 19's MLA decode at batch 1 inside a decode step (CUDA graph, programmatic dependent
    # launch) rather than one launch timed alone: bench decode --trace at 1k and 32k context, 64
    # heads (the whole model's attention) and 8 (rank 0 of 8 with the whole cache), NVFP4 experts
    # (the attention is bf16 either way). The trace's `adds` column is what each kernel adds to the
    # step; the slope rows give the per-layer cost of the context (32k less 1k).
    for h in 64 8; do
      tp=(); [ $h = 8 ] && tp=(--tensor-parallel-size 8 --kv-cache-whole)
      for ctx in ${MLA_STEP_CONTEXTS:-1024 32768}; do
        echo "== h$h ctx$ctx"
        tessera bench decode --device cuda --synthetic kimi-k2.5 --weights nvfp4 --layers 3 --batch 1 --context $ctx \
          --steps 30 "${tp[@]}" --trace > "$OUT/mla_step_h${h}_$ctx.log" 2>&1 || tail -3 "$OUT/mla_step_h${h}_$ctx.log"
        grep -E "copy|^ +1 |slope" "$OUT/mla_step_h${h}_$ctx.log" | cut -c1-160 | head -6
        grep -iE "mla|attend|combine" "$OUT/mla_step_h${h}_$ctx.log" | cut -c1-150 | head -12
        grep -E "step span" "$OUT/mla_step_h${h}_$ctx.log"
      done
    done
    tessera bench kernels --iterations 50 --filter "mla_decode" --batch 1 --heads 8 --heads 64 --context 32768 2>&1 |
      grep -E "ceiling|read-only|mla_decode (kvmajor|wgmma|stream) " | grep -v "splits (16|32|64|128) " || true ;;
  ncu-src)
    # Nsight Compute's full set with per-instruction stall samples on any tessera command: run.sh
    # ncu-src NAME KERNEL_REGEX COUNT TESSERA_ARGS... The report, its details page and its SASS
    # source page (csv) go to $OUT/NAME*; the headline metrics are printed.
    name=$1 kernel=$2 count=$3
    shift 3
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    [ -n "$NCU" ] || { echo "no ncu on this machine"; exit 0; }
    echo "== ncu $name: $kernel x $count in tessera $*"
    timeout 300 "$NCU" -k "regex:$kernel" -c "$count" --set full --import-source yes -f -o "$OUT/$name" tessera "$@" \
      > "$OUT/${name}_run.log" 2>&1 || tail -5 "$OUT/${name}_run.log"
    "$NCU" -i "$OUT/$name.ncu-rep" --page details > "$OUT/${name}_details.txt" 2>&1 || true
    "$NCU" -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/${name}_sass.csv" 2>&1 || true
    grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|Active Warps Per|No Eligible|Registers Per|Achieved Occupancy" \
      "$OUT/${name}_details.txt" | cut -c1-150 | head -40
    echo "sass page: $(wc -c < "$OUT/${name}_sass.csv") bytes" ;;
  ncu-prefill)
    # Nsight Compute on the MLA prefill attention kernel (default: the Hopper wgmma kernel; argument:
    # a kernel regex, e.g. prefill_attend_kernel for mma.sync) at 64 heads and 8k context, the 128-row
    # blocks: where it stalls (issue 19: 34% of the GEMM rate, and a cycle count of its MMAs and
    # softmax says it could do about twice that). Launch 3 of the bench's timed loop, real clocks.
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    [ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
    kernel="${1:-prefill_attend_wgmma_kernel}"
    timeout 300 "$NCU" -k "regex:$kernel" -s 2 -c 1 --clock-control none --section SpeedOfLight \
      --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats \
      --section MemoryWorkloadAnalysis --section Occupancy \
      env TESSERA_MLA_PREFILL_QUERY_ROWS=128 tessera bench kernels --filter mla_prefill --heads 64 --context 8192 \
      --iterations 2 > "$OUT/ncu_prefill.log" 2>&1
    grep -E "Duration|Throughput|Pipe|Issue Slots|Issued Ipc|Eligible|Active Warps|Stall|Warp Cycles|L1/TEX Hit|L2 Hit|Registers|Occupancy|ERR|rror" \
      "$OUT/ncu_prefill.log" | head -60 || tail -5 "$OUT/ncu_prefill.log" ;;
  ab)
    # The baseline's binaries in a kit of their own (a second build directory: about as long as the
    # first build), then the two alternated on the same GPU.
    baseline_kit || exit 1
    weights=("$@")
    [ ${#weights[@]} -gt 0 ] || weights=(nvfp4 fp8)
    for w in "${weights[@]}"; do
      for round in 1 2; do
        for side in base new; do
          echo "== $w $side (round $round)"
          tessera_side $side 0 bench decode --device cuda --synthetic kimi-k2.5 \
            --weights "$w" --layers 3 --batch 1,16,128 --steps 20 > "$OUT/ab_${w}_${side}_$round.log" 2>&1
          grep -E "^ +(1|16|128) " "$OUT/ab_${w}_${side}_$round.log" || tail -3 "$OUT/ab_${w}_${side}_$round.log"
        done
      done
    done
    for side in base new; do
      echo "== moe_experts cases, $side"
      "$(tessera_of $side)" bench kernels --iterations 20 --cases kimi-k2.5,deepseek-v3 --filter moe_experts > "$OUT/ab_cases_$side.log" 2>&1
      tail -24 "$OUT/ab_cases_$side.log"
    done ;;
  prefill-ab)
    # Issue 19's prefill, this tree against the baseline on the same GPU: bench prefill at 8192-token
    # steps alternated twice, bench offline's 4096-token prefill of each, then this tree's trace of an
    # 8192-token prompt.
    baseline_kit || exit 1
    dir=$(issue19_checkpoint)
    for round in 1 2; do
      for side in base new; do
        echo "== bench prefill, 8192-token steps, $side (round $round)"
        tessera_side $side 100 bench prefill --device cuda \
          --model "$dir" --prompt-lens 4096,8192,16384 --repeats 3 --max-num-batched-tokens 8192 --skip-self-check \
          2>&1 | grep -E "^ +[0-9]+ " || true
      done
    done
    for side in base new; do
      echo "== bench offline, one 4096-token prompt at a time, $side"
      tessera_side $side 100 bench offline --device cuda \
        --model "$dir" --kv-cache-bytes 16GiB --input-len 4096 --output-len 1 --num-requests 8 --concurrency 1 \
        --skip-self-check 2>&1 | grep -E "input tokens/s|TTFT|total tokens/s" || true
    done
    timeout 100 tessera bench prefill --device cuda --model "$dir" --prompt-lens 8192 --repeats 1 \
      --max-num-batched-tokens 8192 --skip-self-check --trace > "$OUT/prefill_ab_trace.log" 2>&1 || true
    sed -n '/kernels of one/,$p' "$OUT/prefill_ab_trace.log" | cut -c1-160 | head -24 ;;
  pairs-priorities)
    # The sixteenth session's two switches, off by default until measured: TESSERA_MLA_WGMMA_PAIRS
    # (the wgmma MLA decode kernel's splits as clusters of two blocks: its GPU tests, the batch-1
    # kernel rows at 64 heads and the 32k decode step) and TESSERA_STREAM_PRIORITIES (the backend
    # stream above the shared expert's: bench decode at batch 1 and 16); each alternated twice.
    set +e
    TESSERA_MLA_WGMMA_PAIRS=1 timeout 120 "$KIT/bin/cuda_tests" --gtest_filter='*MlaWgmma*:*MlaSplits*:*CudaGolden*' \
      --gtest_brief=1 > "$OUT/pairs_tests.log" 2>&1
    show "$OUT/pairs_tests.log"
    TESSERA_MLA_WGMMA_PAIRS=1 timeout 100 "$KIT/bin/backend_ops_tests" --gtest_filter='*mla*' --gtest_brief=1 \
      > "$OUT/pairs_cases.log" 2>&1
    show "$OUT/pairs_cases.log"
    for p in 0 1 0 1; do
      echo "== TESSERA_MLA_WGMMA_PAIRS=$p: bench kernels wgmma h64 b1; bench decode nvfp4 b1 at 32k"
      TESSERA_MLA_WGMMA_PAIRS=$p timeout 60 tessera bench kernels --iterations 30 --filter "wgmma h64 b1 ctx" --batch 1 \
        --heads 64 --context 8192 --context 32768 2>&1 | grep -E "^mla|ceiling" | cut -c1-140
      TESSERA_MLA_WGMMA_PAIRS=$p timeout 60 tessera bench decode --device cuda --synthetic kimi-k2.5 --weights nvfp4 \
        --layers 3 --batch 1 --context 32768 --steps 20 2>&1 | grep -E "^ +1 " || echo failed
    done
    for p in 0 1 0 1; do
      echo "== TESSERA_STREAM_PRIORITIES=$p: bench decode nvfp4, fp8 at batch 1, 16"
      for w in nvfp4 fp8; do
        TESSERA_STREAM_PRIORITIES=$p timeout 60 tessera bench decode --device cuda --synthetic kimi-k2.5 --weights $w \
          --layers 3 --batch 1,16 --steps 20 2>&1 | grep -E "^ +(1|16) " || echo failed
      done
    done
    for p in 0 1; do
      TESSERA_STREAM_PRIORITIES=$p timeout 60 tessera bench decode --device cuda --synthetic kimi-k2.5 --weights nvfp4 \
        --layers 3 --batch 1 --steps 5 --trace > "$OUT/trace_priorities_$p.log" 2>&1 || echo "trace $p failed"
    done ;;
  *) echo "run.sh: unknown '$what'"; exit 2 ;;
esac
