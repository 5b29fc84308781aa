"""Natural English text that ships inside a package-registry wheel (no download at run time).

Two corpora, both test data of the ``gensim==4.4.0`` wheel (``pip install gensim==4.4.0``, or the
project's ``models`` extra):

* :func:`wikipedia_texts` — ``enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``,
  a shortened dump of English Wikipedia articles (CC BY-SA). Pages are read and their markup is
  stripped with gensim's own ``extract_pages`` + ``filter_wiki``; the rest of the clean-up (bold /
  italic quotes, headings, list and table lines, redirects) is :func:`clean_paragraphs`. Used for
  the key statistics ``C = E[k kᵀ]`` of real models.
* :func:`heldout_texts` — ``lee_background.cor``, the Lee corpus (about 300 ABC news paragraphs,
  one per line). Used only for held-out perplexity, never for statistics.

The extracted Wikipedia text is cached under ``cache_root()/corpora/`` keyed by the source file's
sha256 (written atomically), so the 3 s extraction runs once. Token counts measured with the
SmolLM2 tokenizer are in ``mobiedit/data/corpora/README.md``.
"""
from __future__ import annotations

import bz2
import importlib.metadata
import importlib.util
import logging
import re
from pathlib import Path

from .atomic import atomic_write_text
from .digest import files_sha256
from .errors import ConfigError
from .paths import cache_root

log = logging.getLogger(__name__)

PACKAGE = "gensim"
VERSION = "4.4.0"
PIP = f"pip install {PACKAGE}=={VERSION}"
WIKI_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
LEE_FILE = "lee_background.cor"
#: bump when :func:`clean_paragraphs` changes, so old caches are not reused
EXTRACTOR = "gensim-filter_wiki-v1"


def data_file(name: str) -> Path:
    """Path of ``name`` in the installed gensim's ``test/test_data`` (found without importing gensim).

    Raises:
        ConfigError: gensim is not installed, or its wheel lacks the file; the fix names the pip command.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the {PACKAGE} package (which ships the text corpora) is not installed",
                          where=f"corpus file {name}", fix=f"{PIP} (or pip install -e '.[models]')")
    path = Path(list(spec.submodule_search_locations)[0]) / "test" / "test_data" / name
    if not path.is_file():
        raise ConfigError(f"{PACKAGE} is installed but has no {name}", where=str(path),
                          fix=f"install the wheel that ships it: {PIP}")
    return path


def source_info() -> dict:
    """Name, version and licence of the corpus source (for reports and the README)."""
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"package": PACKAGE, "version": version, "wikipedia": WIKI_FILE, "wikipedia_licence": "CC BY-SA",
            "heldout": LEE_FILE, "heldout_origin": "Lee corpus (ABC news), as shipped in gensim's test data"}


_HEADING_OR_MARKUP = re.compile(r"^\s*[=*#:;|{}!]")
_EMPTY_PARENS = re.compile(r"\(\s*[,;:]?\s*\)")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)])")


def clean_paragraphs(text: str) -> list[str]:
    """Plain paragraphs of one page already passed through ``filter_wiki``: blank-line separated
    blocks, without heading / list / table lines and ``''`` / ``'''`` emphasis, whitespace collapsed.
    A redirect page gives []."""
    if text.lstrip()[:9].upper() == "#REDIRECT":
        return []
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.split("\n") if ln.strip() and not _HEADING_OR_MARKUP.match(ln)]
        para = " ".join(lines).replace("'''", "").replace("''", "")
        para = _EMPTY_PARENS.sub("", para)
        para = _SPACE_BEFORE_PUNCT.sub(r"\1", " ".join(para.split()))
        if para:
            out.append(para)
    return out


def _extract_wikipedia(path: Path) -> list[str]:
    """All cleaned paragraphs of the dump's articles, in file order (uses gensim's parser)."""
    try:
        from gensim.corpora.wikicorpus import extract_pages, filter_wiki
    except Exception as e:  # noqa: BLE001 - any import failure of the optional dependency
        raise ConfigError(f"{PACKAGE} cannot be imported ({type(e).__name__}: {e})"[:300], where=PACKAGE,
                          fix=f"reinstall it: {PIP}") from None
    paras: list[str] = []
    with bz2.open(path, "rb") as fh:
        for _title, text, _pageid in extract_pages(fh):
            paras += clean_paragraphs(filter_wiki(text))
    return paras


def _cached(path: Path, extract) -> list[str]:
    """``extract(path)`` read from / written to ``cache_root()/corpora`` (key: file sha256)."""
    key = f"{path.name}.{EXTRACTOR}.{files_sha256([path])[:16]}.txt"
    cache = cache_root() / "corpora" / key
    if cache.is_file():
        return cache.read_text(encoding="utf-8").split("\n")
    paras = extract(path)
    atomic_write_text(cache, "\n".join(paras))
    log.info("extracted %d paragraphs from %s; cached at %s", len(paras), path.name, cache)
    return paras


def wikipedia_texts(min_tokens: int = 20) -> list[str]:
    """Plain-text Wikipedia paragraphs of at least ``min_tokens`` whitespace-separated words
    (shorter ones are captions and fragments), in dump order. Deterministic for a given wheel."""
    paras = _cached(data_file(WIKI_FILE), _extract_wikipedia)
    return [p for p in paras if len(p.split()) >= min_tokens]


def heldout_texts() -> list[str]:
    """The Lee corpus paragraphs (one per line of the file), for held-out perplexity only."""
    text = data_file(LEE_FILE).read_text(encoding="utf-8")
    return [" ".join(line.split()) for line in text.split("\n") if line.strip()]


def chunk_texts(tok, texts: list[str], max_tokens: int = 256, pack: bool = True,
                budget: int | None = None) -> list[str]:
    """Texts of at most ``max_tokens`` tokens each (tokenizer ``tok``, special tokens excluded).

    A text longer than ``max_tokens`` is cut at token boundaries (character offsets of the fast
    tokenizer). With ``pack``, consecutive texts are joined by a newline while the chunk stays
    within ``max_tokens`` (few, full-length rows: little padding). ``budget`` stops once the
    chunks hold that many tokens. Order is preserved; texts within the limit are not altered
    unless packed.
    """
    if max_tokens < 8:
        raise ConfigError(f"max_tokens is {max_tokens}", where="chunk_texts", fix="use at least 8 tokens per chunk")
    out: list[str] = []
    cur: list[str] = []
    cur_n = total = 0
    limit = max_tokens - 2  # room for BOS/EOS the model's tokenizer may add, and re-tokenisation drift
    enc = tok(list(texts), add_special_tokens=False, return_offsets_mapping=True) if texts else None
    for k, text in enumerate(texts):
        for piece, n in _pieces(text, enc["input_ids"][k], enc["offset_mapping"][k], limit):
            if pack and cur and cur_n + 1 + n <= limit:
                cur.append(piece)
                cur_n += 1 + n
                continue
            if cur:
                out.append("\n".join(cur))
                total += cur_n
            cur, cur_n = [piece], n
            if budget is not None and total >= budget:
                return out
    if cur and (budget is None or total < budget):
        out.append("\n".join(cur))
    return out


def _pieces(text: str, ids: list[int], offs: list[tuple[int, int]], limit: int) -> list[tuple[str, int]]:
    """``text`` (token ``ids`` with character offsets ``offs``) cut into pieces of at most
    ``limit`` tokens, each with its token count."""
    if len(ids) <= limit:
        return [(text, len(ids))] if ids else []
    pieces = []
    for s in range(0, len(ids), limit):
        a = offs[s][0]
        b = offs[min(s + limit, len(ids)) - 1][1]
        piece = text[a:b].strip()
        if piece:
            pieces.append((piece, min(limit, len(ids) - s)))
    return pieces


def counterfact_records() -> tuple[list[dict], list[dict]]:
    """The bundled CounterFact edit set (1k) and train set (10k), flat form: the fact LM's
    pretraining facts and the ``counterfact`` key-statistics corpus."""
    import json

    from .requests import bundled_path

    return (json.loads(bundled_path("counterfact-edit-1k.json").read_text()),
            json.loads(bundled_path("counterfact-train.json").read_text()))

