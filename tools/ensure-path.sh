#!/bin/sh
# Make DIR (where `make run` links `ocrwatch`) part of PATH in new shells at once, as
# `pipx ensurepath` does: one guarded line in each existing ~/.bashrc and ~/.zshrc
# (~/.profile alone is read at the next login only). Says in one line what it changed.
# Usage: tools/ensure-path.sh DIR
dir=$1
case ":$PATH:" in *":$dir:"*) exit 0;; esac
mark="# ocrwatch: its program is in $dir"
changed=""
already=""
for rc in "$HOME/.bashrc" "$HOME/.zshrc"; do
    [ -f "$rc" ] || continue
    if grep -qF "$mark" "$rc"; then already=1; continue; fi
    printf '\n%s\ncase ":$PATH:" in *":%s:"*) ;; *) export PATH="%s:$PATH";; esac\n' \
        "$mark" "$dir" "$dir" >> "$rc"
    changed="$changed ${rc#"$HOME"/}"
done
if [ -n "$changed" ]; then
    echo "ocrwatch: added $dir to PATH in ~/${changed# }: new shells find \`ocrwatch\`; in this one run  export PATH=\"$dir:\$PATH\""
elif [ -n "$already" ]; then
    echo "ocrwatch: new shells find \`ocrwatch\`; in this one run  export PATH=\"$dir:\$PATH\""
else
    echo "ocrwatch: $dir is not on your PATH: add  export PATH=\"$dir:\$PATH\"  to your shell's startup file"
fi
