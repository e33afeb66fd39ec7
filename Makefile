# hetfl: `make book` builds the executable book, `make pdf` prints it to one PDF, `make test`
# runs every test, `make test-fast` the quick tier (no notebooks, servers, book build or browser).
# Each target does its own set-up (a .venv with the package installed in it, editable, and the
# offline data) and skips it when done.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
DATA    ?= $(HOME)/.cache/hetfl
STAMP   := $(VENV)/.installed
export HETFL_DATA := $(DATA)

.PHONY: book student test test-fast setup data browser clean smoke-book pdf gpu-kit gpu-kit-dry-run

setup: $(STAMP) data

$(STAMP): requirements.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements.txt
	$(VPY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

data: $(STAMP)
	bash tools/install_data.sh "$(DATA)"

browser:
	bash tools/install_browser.sh

book: setup
	$(VPY) tools/build_book.py --scale book

# The book with every exercise's solution removed, for a class: _build/student/html.
student: setup
	$(VPY) tools/build_book.py --scale book --student

smoke-book: setup
	$(VPY) tools/build_book.py --scale smoke

# The rendered book (BOOK_BUILD, default the one `make book` writes) printed to one PDF by
# the Chromium the browser test drives, offline: $(BOOK_BUILD)/pdf/hetfl.pdf.
BOOK_BUILD ?= _build
pdf: setup browser
	$(VPY) tools/print_pdf.py --build-dir $(BOOK_BUILD) --out $(BOOK_BUILD)/pdf/hetfl.pdf

# Unit tests, then the chapters at smoke scale and the rendered book (and its student
# edition and its PDF), then the rendered pages in a real browser.
test: setup browser
	$(VPY) -m pytest -q -n 2 --dist loadscope tests --ignore=tests/rendered
	$(VPY) tools/build_book.py --scale smoke --build-dir _build/smoke --student
	$(MAKE) pdf BOOK_BUILD=_build/smoke
	HETFL_BOOK_BUILD=_build/smoke $(VPY) -m pytest -q -p no:cacheprovider tests/rendered

# The kit for one call on a GPU machine (tools/gpu_kit.py): .kit/ and the call to make.
gpu-kit: setup
	$(VPY) tools/gpu_kit.py pack

# The kit's GPU command run here on the CPU at smoke scale, in a fresh Python 3.12
# environment with PyTorch from PyPI and only the packages the GPU machine has (no cvxpy,
# papermill, jupytext, Flower or Ray). It downloads PyTorch once: not part of `make test`.
PY312   ?= /root/.pyenv/versions/3.12.1/bin/python
DRY     := .gpu-dry-venv
DRY_OUT := _build/gpu-dry-run
gpu-kit-dry-run: gpu-kit
	test -x $(DRY)/bin/python || $(PY312) -m venv $(DRY)
	$(DRY)/bin/python -m pip install --quiet torch==2.11.0 torchvision==0.26.0 numpy scipy \
	    scikit-learn matplotlib tqdm pandas pytest
	rm -rf $(DRY_OUT) && mkdir -p $(DRY_OUT)/out $(DRY_OUT)/ladder
	# the ladder stage computes book-rung runs into an empty store (a paper-rung run takes
	# hours on a CPU), so that the dry run stores, packs and reports real runs
	env -u HETFL_DATA -u PYTHONPATH $(DRY)/bin/python tools/gpu_kit.py there --kit .kit \
	    --out $(DRY_OUT)/out --budget-s 540 --rung book --device cpu --scale smoke --store $(DRY_OUT)/ladder

# The quick tier: the library's unit tests, the method contract, the golden histories (on
# this CPU's own kernels) and the conformance suite; not the tests marked slow (servers,
# Ray, notebooks, the book build, fresh interpreters, long runs), not the rendered pages.
test-fast: setup
	$(VPY) -m pytest -q -n 2 --dist loadscope -m "not slow" tests --ignore=tests/rendered

clean:
	rm -rf _build
