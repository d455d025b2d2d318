#!/usr/bin/env bash
# Writes a man page (section 1) for a program from its own --help text, so the page and --help
# come from the same argument definitions and cannot drift apart.
# usage: help2man.sh <binary> <one-line description> <output.1>
set -euo pipefail
bin=$1 desc=$2 out=$3
name=$(basename "$bin")
help=$("$bin" --help)
version=$("$bin" --version 2>/dev/null | head -1 || true)
# troff: backslashes first, then lines that would start a request.
esc() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
{
  printf '.TH %s 1 "" "%s" "User Commands"\n' "$(echo "$name" | tr '[:lower:]' '[:upper:]')" "${version:-$name}"
  printf '.SH NAME\n%s \\- %s\n' "$name" "$(printf '%s' "$desc" | esc)"
  printf '.SH DESCRIPTION\n'
  printf '.nf\n'
  printf '%s\n' "$help" | esc
  printf '.fi\n'
  printf '.SH SEE ALSO\nThe documentation installed under share/doc/omprs (README.md, ompcc.md, remote.md).\n'
} > "$out.tmp"
mv -f "$out.tmp" "$out"
