"""The test documents of a real-model eval, as the results tables describe them.

From an eval.json written by `kvcpt eval` (per cell document_index,
document_source, copy_share_per_document; at the top document_pick,
max_copy_share, copy_ngram): which documents were scored, what each source
is (SOURCES below, from the corpus's own SOURCES.md and
SOURCES-longdocs.md), and how much of each scored window is a copy of an
earlier 8-token sequence of the same window. Standard library only.
"""
import math
import os
import statistics

# What each corpus file is, by its name without .zst; a file not listed is
# said to be undescribed rather than guessed at.
SOURCES = {
    "arxiv-latex.jsonl": "LaTeX sources of TeX Live documentation (Debian texlive-*-doc): package manuals, class "
                         "guides, templates and sample papers; no arXiv paper, despite the file's name",
    "books.jsonl": "Jane Austen's six novels (Debian r-cran-janeaustenr) and the 66 books of the King James Bible "
                   "(Debian bible-kjv-text), plain text",
    "longdocs.jsonl": "long English technical documentation from Debian packages: the Linux kernel's "
                      "Documentation/, the PostgreSQL, Python, Django, Perl and Rust manuals, the C++ Annotations, "
                      "GNU Texinfo manuals, the Debian Handbook and others (SOURCES-longdocs.md)",
}


def source_name(path):
    """a document source's short name: the input file's name without .zst"""
    name = os.path.basename(path or "?")
    return name[:-4] if name.endswith(".zst") else name


def describe(name):
    return SOURCES.get(name, "not described here (see the corpus's SOURCES files)")


def documents(ev):
    """[(split index, source name, copy share)] of an eval.json's scored documents, in the order of
    ppl_per_document; None when it records none (an eval.json from before these fields). Every cell
    of one eval scores the same documents; a cell that differs is an error."""
    first = None
    for r in ev["results"]:
        if "document_index" not in r:
            return None
        docs = list(zip(r["document_index"], [source_name(s) for s in r.get("document_source") or
                                               [None] * len(r["document_index"])],
                        r["copy_share_per_document"]))
        if first is None:
            first = docs
        elif [d[0] for d in docs] != [d[0] for d in first]:
            raise SystemExit("realmodel_docs: the cells of one eval.json score different documents (%s)" % r["policy"])
    return first


def same_documents(evs, where):
    """the documents every eval.json of evs scores (they must be the same ones, in the same order:
    every comparison is paired by document); exits naming `where` otherwise"""
    docs = [documents(e) for e in evs]
    if any(d is None for d in docs):
        return None
    for d in docs[1:]:
        if [x[0] for x in d] != [x[0] for x in docs[0]]:
            raise SystemExit("realmodel_docs: %s: the evals score different documents; a comparison needs the same "
                             "ones (was an eval.json left from a run with another PICK or MAX_COPY_SHARE?)" % where)
    return docs[0]


def by_source(docs, values):
    """{source: [value of each of its documents]}, sources in order of first appearance"""
    out = {}
    for (_, src, _), v in zip(docs, values):
        out.setdefault(src, []).append(v)
    return out


def pick_line(ev):
    """how the documents were drawn, in words"""
    pick = ev.get("document_pick", "first")
    how = ("interleaved by source: one document of each corpus file in turn (a stratified pick, equal numbers "
           "until a file runs out)" if pick == "interleave" else
           "the first eligible documents of the test split, which holds the corpus files one after another "
           "(the first file fills the pick before the next)")
    limit = ev.get("max_copy_share", 1.0)
    if limit < 1:
        how += "; documents with more than %g of their scored tokens copying passed over" % limit
    return how


def section(L, ev, full_before=None):
    """Markdown lines: the documents at context L (sources, copy shares; full attention's PPL per
    document when full_before, its per-document PPLs, is given)"""
    docs = documents(ev)
    if docs is None:
        return ["Documents at L = %d: this eval.json records no document indices, sources or copy shares." % L]
    n = ev.get("copy_ngram", 8)
    skipped = max((r.get("documents_skipped_copy_share", 0) for r in ev["results"]), default=0)
    out = ["**Documents at L = %d**: %d, %s%s. *Copy share*: the share of a document's scored tokens whose %d "
           "tokens ending there also end earlier in the window (predictable by copying the window's own past)." %
           (L, len(docs), pick_line(ev), "; %d passed over for their copy share" % skipped if skipped else "", n), "",
           "| source | what it is | documents | copy share: mean, median [min, max] |", "|---|---|---|---|"]
    groups = by_source(docs, [c for _, _, c in docs])
    for src, cs in groups.items():
        out.append("| %s | %s | %d | %.3f, %.3f [%.3f, %.3f] |" % (src, describe(src), len(cs), statistics.fmean(cs),
                                                                  statistics.median(cs), min(cs), max(cs)))
    cs = [c for _, _, c in docs]
    out.append("| all | | %d | %.3f, %.3f [%.3f, %.3f] |" % (len(cs), statistics.fmean(cs), statistics.median(cs),
                                                            min(cs), max(cs)))
    out += ["", "| # | test-split index | source | copy share%s |" % (" | full PPL" if full_before else ""),
            "|---|---|---|---%s|" % ("|---" if full_before else "")]
    for i, (d, src, c) in enumerate(docs):
        out.append("| %d | %d | %s | %.3f%s |" % (i + 1, d, src, c, " | %.3f" % full_before[i] if full_before else ""))
    return out


def geo_ratio(lnx):
    """exp of the mean of ln values"""
    return math.exp(statistics.fmean(lnx))
