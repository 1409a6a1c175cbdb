#!/usr/bin/env bash
# Fills the git-ignored folder that tests/gpu/pretrain.sh takes to a lent GPU machine (only the checkout
# travels there, at most 64 MiB with the folders a call carries):
#   $CARRY/wheels/     the Python packages its image lacks, for Python 3.12 (the versions installed here):
#                      hydra-core, omegaconf, antlr4-python3-runtime (built here: PyPI has no wheel of
#                      4.9.3), platformdirs, pooch, and litdata 0.2.44 with boto3, botocore, s3transfer
#                      and jmespath (litdata imports boto3 when it is imported). botocore's wheel (15 MB)
#                      keeps the service models of s3 and sts alone (0.9 MB): nothing on that machine
#                      reaches AWS, and S3 is the only service bert_exp and litdata call.
#   $CARRY/corpus/wikipedia/part*.txt.xz   the shared Wikipedia parts, compressed as they are (the
#                      project reads .txt.xz directly)
# and prints the total that would travel (the checkout's tracked and untracked-not-ignored files and the
# carry) against 64 MiB; it exits 1 when that is over.
#
#   BERT_EXP_DATA=../shared/data bash tests/gpu/pack_carry.sh
#
# CARRY (default .gpu_carry) is added to .git/info/exclude. PARTS (default 'part*') picks the Wikipedia
# parts, e.g. PARTS='part0[0-9]' for ten of the sixteen.
set -euo pipefail
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-.gpu_carry}
CARRY=${CARRY%/}
DATA=${BERT_EXP_DATA:-../shared/data}
PARTS=${PARTS:-part*}
PY=${PYTHON:-python3}
LIMIT=$((64 << 20))

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF "/$CARRY/" "$exclude" 2>/dev/null || echo "/$CARRY/" >> "$exclude"
mkdir -p "$CARRY/corpus/wikipedia"

# the corpus: copied only where newer; parts no longer asked for are removed
shopt -s nullglob
parts=("$DATA"/corpus/wikipedia/$PARTS.txt.xz)
[ ${#parts[@]} -gt 0 ] || { echo "no Wikipedia parts $DATA/corpus/wikipedia/$PARTS.txt.xz (set BERT_EXP_DATA)" >&2; exit 2; }
cp -u "${parts[@]}" "$CARRY/corpus/wikipedia/"
for f in "$CARRY"/corpus/wikipedia/*.txt.xz; do
  [ -e "$DATA/corpus/wikipedia/$(basename "$f")" ] && [[ $(basename "$f") == $PARTS.txt.xz ]] || rm -f "$f"
done

# the wheels, fresh each time (two versions of one package would stop the install there)
versions=$($PY - <<'EOF'
import importlib.metadata as md
names = ["hydra-core", "omegaconf", "platformdirs", "pooch", "litdata", "boto3", "botocore", "s3transfer", "jmespath"]
print(" ".join(f"{n}=={md.version(n)}" for n in names))
EOF
)
rm -rf "$CARRY/wheels"
mkdir -p "$CARRY/wheels"
# shellcheck disable=SC2086
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$CARRY/wheels" $versions
$PY -m pip wheel -q --no-deps antlr4-python3-runtime==4.9.3 -w "$CARRY/wheels"
$PY - "$CARRY/wheels" <<'EOF'
"""botocore's wheel with the service models of s3 and sts alone (the rest is 14 MB of JSON for AWS
services nothing here calls); RECORD loses the lines of the files taken out."""
import sys
import zipfile
from pathlib import Path

KEEP = {"s3", "sts"}
wheel = next(Path(sys.argv[1]).glob("botocore-*.whl"))
slim = wheel.with_suffix(".slim")


def kept(name: str) -> bool:
    parts = name.split("/")
    return not (parts[:2] == ["botocore", "data"] and len(parts) > 3 and parts[2] not in KEEP)


with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
        if not kept(info.filename):
            continue
        data = src.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines(keepends=True)
            data = "".join(line for line in lines if kept(line.split(",")[0])).encode()
        dst.writestr(info, data)
before = wheel.stat().st_size
slim.replace(wheel)
print(f"botocore: {before / 2**20:.1f} MiB -> {wheel.stat().st_size / 2**20:.1f} MiB (service models: s3, sts)")
EOF

# what travels: tracked files, untracked files git does not ignore, the carry
sum_files() { xargs -0 -r du -b 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
tracked=$(git ls-files -z | sum_files)
untracked=$(git ls-files -z --others --exclude-standard | sum_files)
wheels=$(find "$CARRY/wheels" -type f -print0 | sum_files)
corpus=$(find "$CARRY/corpus" -type f -print0 | sum_files)
total=$((tracked + untracked + wheels + corpus))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "wheels:   $(ls "$CARRY/wheels" | wc -l) files, $(mib "$wheels")"
echo "corpus:   $(ls "$CARRY/corpus/wikipedia" | wc -l) Wikipedia parts, $(mib "$corpus")"
echo "checkout: tracked $(mib "$tracked"), untracked and not ignored $(mib "$untracked")"
echo "total that travels with carry [\"$CARRY\"]: $(mib "$total") of 64 MiB ($total of $LIMIT bytes)"
if [ "$total" -gt "$LIMIT" ]; then
  echo "over the limit: carry fewer parts (PARTS='part0[0-9]')" >&2
  exit 1
fi
