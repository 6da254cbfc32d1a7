#!/usr/bin/env bash
# Installs everything the project needs, idempotently: Debian packages (Bazel,
# Fashion-MNIST) and the pinned virtualenv in .venv. Fast when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(bazel-bootstrap dataset-fashion-mnist)
VENV=.venv
STAMP="$VENV/.installed"

missing=()
command -v bazel >/dev/null 2>&1 || missing+=(bazel-bootstrap)
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] \
  || missing+=(dataset-fashion-mnist)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
    "${DEBIAN_PACKAGES[@]}" >/dev/null
fi

# The interpreter the venv is built from: never the venv's own (make puts
# .venv/bin first on PATH, and the venv is removed before it is rebuilt).
python=""
for candidate in python3.11 python3; do
  path="$(PATH="$(echo "$PATH" | tr ':' '\n' | grep -vx "$PWD/$VENV/bin" \
    | paste -sd:)" command -v "$candidate" 2>/dev/null || true)"
  if [ -n "$path" ] && "$path" -c \
      'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    python="$path"; break
  fi
done
if [ -z "$python" ]; then
  echo "setup: needs Python 3.11 (the only version this project is tested with; TFF 0.87 accepts none newer); none found on PATH." >&2
  exit 1
fi

want="$(cat requirements.txt requirements-tff.txt | sha256sum | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi
echo "setup: creating $VENV with pinned dependencies (about 2 minutes)"
rm -rf "$VENV"
"$python" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r requirements.txt \
  2> >(grep -v "^WARNING: Location" >&2)
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps \
  -r requirements-tff.txt 2> >(grep -v "^WARNING: Location" >&2)
"$VENV/bin/python" -c 'import tensorflow_federated, tensorflow_datasets, matplotlib' \
  2>/dev/null || { echo "setup: the virtualenv does not import" >&2; exit 1; }
echo "$want" > "$STAMP"
