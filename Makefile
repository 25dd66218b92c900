# Two commands do all the set-up:  `make run`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# GPU=auto installs the vLLM engine when an NVIDIA GPU answers; GPU=0 never, GPU=1 always.
GPU    ?= auto
# `make run` links the program here, so that `ocrwatch` works in any shell.
LINK_DIR ?= $(HOME)/.local/bin

# pip's output (and the build backends' warnings) goes to a log; a failure shows its end.
PIP = $(BIN)/python -m pip install --disable-pip-version-check --no-input -q
LOG = $(VENV)/install.log
QUIET = >>$(LOG) 2>&1 || { tail -n 25 $(LOG); echo "ocrwatch: $@ failed; the whole log is $(LOG)"; exit 1; }

# What PyGObject (the tray's GTK backends) needs to build: a C compiler and these headers.
TRAY_PKGCONFIG := cairo gobject-introspection-1.0
TRAY_DEBIAN := gcc pkg-config python3-dev libgirepository1.0-dev libcairo2-dev gir1.2-gtk-3.0 gir1.2-ayatanaappindicator3-0.1
TRAY_FEDORA := gcc pkg-config python3-devel gobject-introspection-devel cairo-gobject-devel gtk3 libayatana-appindicator-gtk3
TRAY_ARCH := gcc pkgconf gobject-introspection cairo gtk3 libayatana-appindicator

.PHONY: run start test lint clean uninstall man tray-extra tray-help gpu-extra

$(BIN)/python:
	@echo "ocrwatch: setting up $(VENV) (a minute or two the first time; log: $(LOG))"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --disable-pip-version-check -q --upgrade pip $(QUIET)

# One stamp per extra: an extra that failed leaves no stamp and is tried again next time.
$(VENV)/.base: pyproject.toml | $(BIN)/python
	@$(PIP) -e . $(QUIET)
	@touch $@

$(VENV)/.dev: $(VENV)/.base
	@$(PIP) -e '.[dev]' $(QUIET)
	@touch $@

# The tray extra builds PyGObject against the system's GTK. Without its system packages
# the daemon runs all the same (with its menu where the panel hosts StatusNotifierItems,
# ocrwatch/tray/sni.py): say what to install, in one line.
# The hint is said once (the .tray-hint stamp), in one short line; `make tray-help` repeats it.
$(VENV)/.tray: $(VENV)/.base
	@if ! { command -v cc >/dev/null || command -v gcc >/dev/null; } \
	    || ! pkg-config --exists $(TRAY_PKGCONFIG) 2>/dev/null; then \
		if [ ! -e $(VENV)/.tray-hint ]; then touch $(VENV)/.tray-hint; \
		echo "ocrwatch: no menu in the tray on panels without StatusNotifierItems: \`make tray-help\`"; fi; \
	elif $(PIP) -e '.[tray]' >>$(LOG) 2>&1; then touch $@; \
	else echo "ocrwatch: the tray extra (PyGObject) did not build; the tray has its menu only on panels that host StatusNotifierItems. Why: $(LOG)"; fi

tray-extra: $(VENV)/.tray

tray-help:
	@echo "The tray's GTK backends (PyGObject: the menu on panels without StatusNotifierItems) need these; install them, then run make again:"
	@echo "  Debian/Ubuntu: sudo apt install $(TRAY_DEBIAN)"
	@echo "  Fedora: sudo dnf install $(TRAY_FEDORA)"
	@echo "  Arch: sudo pacman -S $(TRAY_ARCH)"

$(VENV)/.gpu: $(VENV)/.base
	@echo "ocrwatch: installing the GPU engine (vLLM, a few GB)"
	@$(PIP) -e '.[gpu]' $(QUIET)
	@touch $@

gpu-extra: $(VENV)/.base
	@if [ "$(GPU)" = 1 ] || { [ "$(GPU)" = auto ] && nvidia-smi >/dev/null 2>&1; }; then \
		$(MAKE) --no-print-directory $(VENV)/.gpu; fi

# Link the program into LINK_DIR once; never replace a file that is not such a link.
link: $(VENV)/.base
	@target="$(LINK_DIR)/ocrwatch"; want="$(abspath $(BIN))/ocrwatch"; \
	if [ "$$(readlink "$$target" 2>/dev/null)" = "$$want" ]; then :; \
	elif [ -e "$$target" ] && ! [ -L "$$target" ]; then :; \
	elif [ -L "$$target" ] && [ -e "$$target" ]; then :; \
	else mkdir -p "$(LINK_DIR)" && ln -sfn "$$want" "$$target" && \
		case ":$$PATH:" in *":$(LINK_DIR):"*) echo "ocrwatch: linked $$target: \`ocrwatch\` now works in any shell";; \
		*) echo "ocrwatch: linked $$target"; sh tools/ensure-path.sh "$(LINK_DIR)";; esac; fi

.PHONY: link

# `make run` holds this terminal and says so; `make start` runs the daemon in the
# background, as the login autostart does, and returns once it answers.
run: $(VENV)/.base tray-extra gpu-extra link
	@echo "ocrwatch: the daemon runs in this terminal until Ctrl-C; use another one for \`ocrwatch status\`, or \`make start\` to run it in the background"
	@$(BIN)/ocrwatch run

# `ocrwatch start` waits (a minute at most) for the daemon to answer, or to end: a start
# that failed (a typo in the config) is said, with its reason, and make fails with it.
start: $(VENV)/.base tray-extra gpu-extra link
	@$(BIN)/ocrwatch start

lint: $(VENV)/.dev tray-extra
	$(BIN)/ruff check ocrwatch tests benchmarks
	$(BIN)/mypy ocrwatch
	$(BIN)/mypy -p benchmarks
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest -ra --durations=25 $(PYTEST_ARGS)

# The man page the wheel ships (setup.py: share/man/man1), made from the parser;
# tests/test_packaging.py fails when it lags behind the options.
man: $(VENV)/.base
	@$(BIN)/ocrwatch manpage > packaging/ocrwatch.1 && echo "ocrwatch: wrote packaging/ocrwatch.1"

# The link `make run` made goes with the venv it points into (never another file); the
# PATH line it added stays (harmless), and is said: `make uninstall` removes it too.
clean:
	@target="$(LINK_DIR)/ocrwatch"; \
	if [ "$$(readlink "$$target" 2>/dev/null)" = "$(abspath $(BIN))/ocrwatch" ]; then \
		rm -f "$$target" && echo "ocrwatch: removed the link $$target"; fi
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
	@for rc in "$$HOME/.bashrc" "$$HOME/.zshrc"; do \
		if grep -qF "# ocrwatch: its program is in $(LINK_DIR)" "$$rc" 2>/dev/null; then \
		echo "ocrwatch: the PATH line for $(LINK_DIR) stays in $$rc (\`make uninstall\` removes it, with the autostart entries)"; fi; done

# Stops the daemon, removes the autostart entries, the link and the PATH lines (names
# the data it leaves: `ocrwatch uninstall`), then the venv.
uninstall: $(VENV)/.base
	@$(BIN)/ocrwatch uninstall --yes
	@$(MAKE) --no-print-directory clean
