#!/usr/bin/env bash
# grep/glob benchmark: Toolyard's search engines against ripgrep and fd on a large real tree.
#
#   bench/grep_glob.sh [TREE]        (default: ~/.cargo/registry/src)
#
# Environment: RUNS (warm runs per case, default 9), COLD_RUNS (default 3, 0 to skip),
# RG / FD (reference binaries), SEARCH_BENCH (a prebuilt search_bench example binary),
# RESULTS (default bench/RESULTS.md).
#
# Both sides produce the same output volume: the engines run uncapped through
# crates/toolyard-tools/examples/search_bench.rs and print every result (`path:line:text`,
# one path per line), rg runs with `--no-heading -n`, fd plainly; all output goes to a file
# (not /dev/null, which some tools special-case). Each case alternates the two tools every run;
# the table shows medians and the ratio toolyard / reference. Cold-cache runs need root
# (`echo 3 > /proc/sys/vm/drop_caches`) and are skipped otherwise.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TREE=${1:-${BENCH_TREE:-$HOME/.cargo/registry/src}}
RUNS=${RUNS:-9}
COLD_RUNS=${COLD_RUNS:-3}
RESULTS=${RESULTS:-$REPO/bench/RESULTS.md}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

[ -d "$TREE" ] || { echo "no such tree: $TREE" >&2; exit 1; }
TREE=$(cd "$TREE" && pwd -P)

# The newest of ~/.cargo/bin and PATH wins; install with cargo when neither has it.
find_tool() {
    local c
    for c in "$@"; do
        if [ -x "$HOME/.cargo/bin/$c" ]; then echo "$HOME/.cargo/bin/$c"; return 0; fi
    done
    for c in "$@"; do
        if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
    done
    return 1
}
RG=${RG:-$(find_tool rg || true)}
if [ -z "$RG" ]; then
    cargo install ripgrep --locked
    RG=$HOME/.cargo/bin/rg
fi
FD=${FD:-$(find_tool fd fdfind || true)}
if [ -z "$FD" ]; then
    cargo install fd-find --locked
    FD=$HOME/.cargo/bin/fd
fi

if [ -z "${SEARCH_BENCH:-}" ]; then
    echo "building search_bench (release)..." >&2
    SEARCH_BENCH=$(cd "$REPO" && cargo build --release -p toolyard-tools --example search_bench \
        --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*search_bench\)".*/\1/p' | tail -1)
    [ -x "$SEARCH_BENCH" ] || { echo "building search_bench failed" >&2; exit 1; }
fi

# Toolyard honours .gitignore without a git repository; ask the references to do the same.
RG_FLAGS=(--no-heading -n -S --color never)
FD_FLAGS=(-t f --color never)
NOTES=()
if "$RG" --help 2>&1 | grep -q -- '--no-require-git'; then
    RG_FLAGS+=(--no-require-git)
else
    NOTES+=("rg lacks --no-require-git: it ignores .gitignore files outside git repositories, so file sets may differ.")
fi
if "$FD" --help 2>&1 | grep -q -- '--no-require-git'; then
    FD_FLAGS+=(--no-require-git)
else
    NOTES+=("fd lacks --no-require-git: it ignores .gitignore files outside git repositories, so file sets may differ.")
fi

can_drop_caches() { [ "$COLD_RUNS" -gt 0 ] && (sync && echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
COLD=0
if can_drop_caches; then COLD=1; fi

# Run a command in TREE with output to $1; print the elapsed microseconds.
time_us() {
    local out=$1 s e
    shift
    s=$(date +%s%N)
    (cd "$TREE" && "$@") >"$out" 2>/dev/null || true
    e=$(date +%s%N)
    echo $(((e - s) / 1000))
}

median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print a[(NR+1)/2]; else print int((a[NR/2]+a[NR/2+1])/2)}'; }
ms() { awk -v us="$1" 'BEGIN {printf "%.1f", us/1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b==0) print "n/a"; else printf "%.2f", a/b}'; }

ROWS=()
# run_case LABEL KIND TARGET OURS_PATTERN -- REFERENCE COMMAND...
run_case() {
    local label=$1 kind=$2 target=$3 pattern=$4
    shift 5
    local ours=("$SEARCH_BENCH" "$kind" "$pattern" "$TREE") ref=("$@")
    local i t_ours=() t_ref=() c_ours=() c_ref=()
    # Warm-up (fills the page cache) and the result counts.
    time_us "$WORK/ours" "${ours[@]}" >/dev/null
    time_us "$WORK/ref" "${ref[@]}" >/dev/null
    local n_ours n_ref
    n_ours=$(wc -l <"$WORK/ours")
    n_ref=$(wc -l <"$WORK/ref")
    for ((i = 0; i < RUNS; i++)); do
        if ((i % 2 == 0)); then
            t_ours+=("$(time_us "$WORK/ours" "${ours[@]}")")
            t_ref+=("$(time_us "$WORK/ref" "${ref[@]}")")
        else
            t_ref+=("$(time_us "$WORK/ref" "${ref[@]}")")
            t_ours+=("$(time_us "$WORK/ours" "${ours[@]}")")
        fi
    done
    local m_ours m_ref
    m_ours=$(printf '%s\n' "${t_ours[@]}" | median)
    m_ref=$(printf '%s\n' "${t_ref[@]}" | median)
    local cold="skipped"
    if [ "$COLD" = 1 ]; then
        for ((i = 0; i < COLD_RUNS; i++)); do
            if ((i % 2 == 0)); then
                drop_caches; c_ours+=("$(time_us "$WORK/ours" "${ours[@]}")")
                drop_caches; c_ref+=("$(time_us "$WORK/ref" "${ref[@]}")")
            else
                drop_caches; c_ref+=("$(time_us "$WORK/ref" "${ref[@]}")")
                drop_caches; c_ours+=("$(time_us "$WORK/ours" "${ours[@]}")")
            fi
        done
        local mc_ours mc_ref
        mc_ours=$(printf '%s\n' "${c_ours[@]}" | median)
        mc_ref=$(printf '%s\n' "${c_ref[@]}" | median)
        cold="$(ms "$mc_ours") / $(ms "$mc_ref") = **$(ratio "$mc_ours" "$mc_ref")**"
    fi
    local r verdict
    r=$(ratio "$m_ours" "$m_ref")
    verdict=$(awk -v r="$r" -v t="$target" 'BEGIN {print (r+0 <= t+0) ? "yes" : "NO"}')
    local same="$n_ours"
    [ "$n_ours" = "$n_ref" ] || same="$n_ours vs $n_ref"
    ROWS+=("| $label | \`$pattern\` | $same | $(ms "$m_ours") | $(ms "$m_ref") | **$r** | ≤ $target: $verdict | $cold |")
    echo "$label: toolyard $(ms "$m_ours") ms, reference $(ms "$m_ref") ms, ratio $r (results $same; cold: $cold)" >&2
}

run_case "grep literal" grep 1.3 'impl Drop for' -- "$RG" "${RG_FLAGS[@]}" 'impl Drop for'
run_case "grep regex" grep 1.3 'pub fn \w+_mut\(' -- "$RG" "${RG_FLAGS[@]}" 'pub fn \w+_mut\('
run_case "grep case-insensitive word" grep 1.3 '\bmutex\b' -- "$RG" "${RG_FLAGS[@]}" '\bmutex\b'
run_case "grep many matches" grep 1.3 'unsafe' -- "$RG" "${RG_FLAGS[@]}" 'unsafe'
run_case "glob all .rs" glob 1.5 '**/*.rs' -- "$FD" "${FD_FLAGS[@]}" -g '*.rs'
run_case "glob by name" glob 1.5 '**/Cargo.toml' -- "$FD" "${FD_FLAGS[@]}" -g 'Cargo.toml'
run_case "glob anchored dir" glob 1.5 '**/tests/*.rs' -- "$FD" "${FD_FLAGS[@]}" -p -g '**/tests/*.rs'

FILES=$(cd "$TREE" && "$FD" -t f -u . | wc -l)
SIZE=$(du -sh "$TREE" 2>/dev/null | cut -f1)
CPU=$(awk -F: '/model name/ {gsub(/^ +/, "", $2); print $2; exit}' /proc/cpuinfo 2>/dev/null || echo unknown)
COMMIT=$(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
{
    echo "<!-- grep-glob:start -->"
    echo "## grep / glob vs ripgrep / fd"
    echo
    echo "Measured $(date -u +%Y-%m-%d) by \`bench/grep_glob.sh\` at commit \`$COMMIT\` (plus working tree)."
    echo "Tree: \`$TREE\` ($FILES files, $SIZE). Machine: $(nproc) CPUs ($CPU), Linux $(uname -r)."
    echo "References: $("$RG" --version | head -1), $("$FD" --version | head -1)."
    echo "Medians of $RUNS warm runs (tools alternating each run), and of $COLD_RUNS cold runs (page cache dropped before every run) when root allows it."
    echo "Toolyard runs its engines uncapped (\`crates/toolyard-tools/examples/search_bench.rs\`), sorted (grep by path and line, glob newest first), printing every result; rg runs with \`${RG_FLAGS[*]}\`, fd with \`${FD_FLAGS[*]}\`; all output goes to a file."
    echo
    echo "| case | pattern | results | toolyard ms | reference ms | ratio | target | cold ms (toolyard / ref = ratio) |"
    echo "|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "Notes: process start-up is included on both sides. Toolyard cuts lines over 500 characters (rg prints them whole), so its output is at most as large. Toolyard's glob lstat()s every match (through its parent directory opened beneath the workspace root) to sort by mtime and to drop names a symlink swap could have shown from outside; fd does neither."
    for n in "${NOTES[@]+"${NOTES[@]}"}"; do echo "$n"; done
    echo "<!-- grep-glob:end -->"
} >"$WORK/section.md"

if [ -f "$RESULTS" ] && grep -q '<!-- grep-glob:start -->' "$RESULTS"; then
    awk -v section="$WORK/section.md" '
        /<!-- grep-glob:start -->/ { while ((getline line < section) > 0) print line; skip = 1; next }
        /<!-- grep-glob:end -->/ { skip = 0; next }
        !skip { print }
    ' "$RESULTS" >"$WORK/results.md"
    cp "$WORK/results.md" "$RESULTS"
elif [ -f "$RESULTS" ]; then
    { echo; cat "$WORK/section.md"; } >>"$RESULTS"
else
    mkdir -p "$(dirname "$RESULTS")"
    { echo "# Benchmark results"; echo; cat "$WORK/section.md"; } >"$RESULTS"
fi
cat "$WORK/section.md"
