#!/usr/bin/env bash
# Pack omldm for `flink run` on a Flink 2.0.1 cluster whose nodes do not have omldm installed.
#
#   bash deploy/pack.sh [--no-venv] [--out DIR]
#
# Writes into DIR (default: <repo>/dist, git-ignored):
#   omldm-venv.tar.gz  a virtual environment with omldm and its pinned requirements, for
#                      `-pyarch omldm-venv.tar.gz#venv -pyexec venv/bin/python`
#                      (skipped with --no-venv; several minutes and ~1 GB: torch, pyflink)
#   omldm-src.zip      the packages flink_jobs learning middleware operators deploy, for `-pyfs`
#   jars/              flink-connector-kafka.jar and kafka-clients.jar (sha256-checked by
#                      deploy/assets.py) and omldm-java-*.jar (compiled from flink_jobs/java),
#                      for `flink run -C URL` (once per jar)
# and prints the `flink run` command that uses them.
#
# PYTHON=/path/to/python3.11 picks the interpreter the venv is built from. A venv is not
# self-contained: venv/bin/python is a symlink to that interpreter and the standard library
# is read from it (pyvenv.cfg `home`). So build on a machine like the TaskManagers (Linux
# x86_64, the same Python 3.11 at the same absolute path, e.g. /usr/bin/python3.11 or the
# one in the TaskManager image) and check that path exists on every TaskManager.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/dist"
build_venv=1
packages=(flink_jobs learning middleware operators deploy)

usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --no-venv) build_venv=0 ;;
    --out)
      [ $# -ge 2 ] || { echo "pack.sh: --out needs a directory" >&2; exit 2; }
      mkdir -p "$2"; out="$(cd "$2" && pwd)"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "pack.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

# The interpreter: $PYTHON, else the project's .venv (bootstrap.sh), else python3.
if [ -n "${PYTHON:-}" ]; then
  python="$PYTHON"
elif [ -x "$root/.venv/bin/python" ]; then
  python="$root/.venv/bin/python"
else
  python="python3"
fi
command -v "$python" >/dev/null 2>&1 || { echo "pack.sh: no interpreter '$python' (set PYTHON)" >&2; exit 1; }
"$python" - <<'EOF' || exit 1
import platform, sys
if sys.version_info[:2] != (3, 11):
    sys.exit(f"pack.sh: {sys.executable} is Python {platform.python_version()}; omldm needs 3.11 "
             "(set PYTHON=/path/to/python3.11)")
if (sys.platform, platform.machine()) != ("linux", "x86_64"):
    print(f"pack.sh: warning: building on {sys.platform}/{platform.machine()}; the venv only "
          "runs on TaskManagers of the same platform", file=sys.stderr)
EOF

mkdir -p "$out/jars"
work="$(mktemp -d "${TMPDIR:-/tmp}/omldm-pack.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# (c) the connector jars, from the checked cache (downloaded on first use), and omldm's own
#     (the record batcher, compiled from flink_jobs/java with javac)
echo "pack.sh: connector jars and omldm's -> $out/jars"
(cd "$root" && "$python" -c 'from deploy.assets import job_jars
for p in job_jars(): print(p)') > "$work/jars.txt"
jar_urls=()
while IFS= read -r jar; do
  cp -f "$jar" "$out/jars/"
  jar_urls+=("file://$out/jars/$(basename "$jar")")
done < "$work/jars.txt"
[ "${#jar_urls[@]}" -eq 3 ] || { echo "pack.sh: expected 3 jars, got ${#jar_urls[@]}" >&2; exit 1; }

# (b) the source zip: package folders at the zip's root, no caches
echo "pack.sh: sources -> $out/omldm-src.zip"
(cd "$root" && "$python" - "$work/omldm-src.zip" "${packages[@]}") <<'EOF'
import os, sys, zipfile
target, packages = sys.argv[1], sys.argv[2:]
n = 0
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
    for package in packages:
        if not os.path.isfile(os.path.join(package, "__init__.py")):
            sys.exit(f"pack.sh: {package}/__init__.py missing: run from a complete checkout")
        for folder, dirs, files in os.walk(package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(files):
                if not name.endswith((".pyc", ".pyo")):
                    zf.write(os.path.join(folder, name))
                    n += 1
print(f"pack.sh: {n} files in {len(packages)} packages")
EOF
mv -f "$work/omldm-src.zip" "$out/omldm-src.zip"

# (a) the virtual environment
if [ "$build_venv" -eq 1 ]; then
  echo "pack.sh: building the venv with $("$python" -c 'import sys; print(sys._base_executable)') (several minutes)"
  # install from a copy of the sources, so that the build writes nothing into the checkout
  mkdir -p "$work/src"
  (cd "$work/src" && "$python" -m zipfile -e "$out/omldm-src.zip" . && cp "$root/setup.py" .)
  "$python" -m venv "$work/venv"
  # (the grep drops pip's noise about this machine's unused local index folders)
  "$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
    "$work/src" 2> >(grep -v "is ignored: it is neither" >&2)
  "$work/venv/bin/python" -c 'import pyflink, flink_jobs, operators, learning, middleware'
  base="$(readlink -f "$work/venv/bin/python")"
  echo "pack.sh: archiving ($(du -sh "$work/venv" | cut -f1) unpacked)"
  if command -v pigz >/dev/null 2>&1; then
    tar -C "$work/venv" -cf - . | pigz > "$work/omldm-venv.tar.gz"
  else
    tar -C "$work/venv" -czf "$work/omldm-venv.tar.gz" .
  fi
  mv -f "$work/omldm-venv.tar.gz" "$out/omldm-venv.tar.gz"
  echo "pack.sh: $out/omldm-venv.tar.gz ($(du -h "$out/omldm-venv.tar.gz" | cut -f1));" \
       "its bin/python links to $base, which must exist on every TaskManager"
fi

# The command. The client (the process that runs flink_run.py and builds the job graph)
# needs pyflink and omldm's requirements: the project's .venv from bootstrap.sh does.
client_python="$root/.venv/bin/python"
[ -x "$client_python" ] || client_python="<python with omldm's requirements>"
jars=""
for u in "${jar_urls[@]}"; do jars="$jars -C $u"; done
echo
echo "# submit (FLINK_HOME: a Flink 2.0.1 distribution configured for your cluster, or"
echo "#   \$(\"$client_python\" -c 'import pyflink,os;print(os.path.dirname(pyflink.__file__))'))"
echo "\"\$FLINK_HOME/bin/flink\" run -d \\"
echo "  -pyclientexec \"$client_python\" \\"
if [ "$build_venv" -eq 1 ] || [ -f "$out/omldm-venv.tar.gz" ]; then
  echo "  -pyarch \"$out/omldm-venv.tar.gz#venv\" -pyexec venv/bin/python \\"
else
  echo "  -pyexec <python with omldm installed, same path on every TaskManager> \\"
fi
echo "  -pyfs \"$out/omldm-src.zip\" \\"
echo " $jars \\"
echo "  -py \"$root/flink_jobs/flink_run.py\" \\"
echo "  --bootstrap-servers HOST:PORT --spokes 2 --hubs 1 --mode process"
