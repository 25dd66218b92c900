"""Search latency over a large index of synthetic pages.

Builds an index of N generated pages (English, French, German, Danish, Spanish and
Portuguese with their accents, and Chinese and Japanese) in a temporary SQLite file
through the project's own queue and index code (``JobQueue.offer``/``claim``,
``store_result``), then times ``ocrwatch.index.search`` for each kind of query the
command line accepts.

    python benchmarks/search.py --pages 20000
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, median, save


def _split(text: str) -> list[str]:
    return text.split()


VOCAB: dict[str, list[str]] = {
    "eng": _split(
        "the of and to in is that for it as was with be by on not he this are or his from at "
        "which but have an they you were her she there been one all we their has would when "
        "if so no will more can about report letter committee meeting council account "
        "invoice payment received during government office children school refugees "
        "question answer department information"
    ),
    "fra": _split(
        "le la les de des du et à un une est dans pour que qui sur par pas plus avec été être "
        "année général département société réunion comité lettre rapport février décembre "
        "août où très déjà après même église théâtre élève français préfecture numéro étude "
        "ministère première deuxième"
    ),
    "deu": _split(
        "der die das und in den von zu mit sich des auf für ist im dem nicht ein eine als "
        "auch es an werden aus er hat dass sie nach wird bei über größer Straße Mädchen "
        "Bürger Öffentlichkeit Prüfung Gemeinde Schüler Grüße Ausschuß Behörde Verwaltung "
        "Bericht Versammlung"
    ),
    "dan": _split(
        "og i at det en den til er som på de med han af for ikke der var mig sig men et har "
        "om vi min havde ham hun nu over da fra du ud sin dem os op man hans hvor år være "
        "søndag møde København kære udvalg brev"
    ),
    "spa": _split(
        "de la que el en y a los se del las un por con no una su para es al lo como más pero "
        "sus le ya o este sí porque esta entre cuando muy sin sobre también año señor "
        "información educación niño después"
    ),
    "por": _split(
        "de a o que e do da em um para é com não uma os no se na por mais as dos como mas foi "
        "ao ele das tem à seu sua ou ser quando muito há nos já está também informação "
        "educação ação coração são"
    ),
}
CJK: dict[str, list[str]] = {
    "zho": _split("我们 中国 北京 上海 东京都 政府 会议 报告 经济 发展 国际 合作 学校 学生 "
                  "委员会 文件 信息 时间 问题 工作 社会 历史 文化 人民"),
    "jpn": _split("東京都 大阪 京都 会社 会議 報告書 経済 学校 先生 学生 委員会 書類 情報 "
                  "時間 問題 仕事 社会 歴史 文化 日本語 ひらがな カタカナ"),
}
# Planted once per this many pages, so every query has a known number of answers.
RARE_EVERY = 500


def make_page(rng: random.Random, n: int, words: int) -> str:
    """One page of text; one page in ten is Chinese or Japanese."""
    if n % 10 == 9:
        lang = "zho" if n % 20 == 9 else "jpn"
        parts = rng.choices(CJK[lang], k=words)
        text = "".join(p + ("。" if rng.random() < 0.1 else "") for p in parts)
        if n % RARE_EVERY == 9:
            text += "国立国会図書館"
        return text
    lang = list(VOCAB)[n % len(VOCAB)]
    tokens = rng.choices(VOCAB[lang], k=words)
    lines = [" ".join(tokens[i:i + 12]) for i in range(0, len(tokens), 12)]
    if n % RARE_EVERY == 0:
        lines.append("Zollverein Grenzübergang café crème naïve façade")
    return "\n".join(lines)


QUERIES: list[tuple[str, str]] = [
    ("word, common", "committee"),
    ("word, rare", "Zollverein"),
    ("two words (AND)", "meeting council"),
    ("phrase", '"café crème"'),
    ("prefix", "Grenz*"),
    ("accent-folded", "facade"),
    ("accent-folded, German", "grenzubergang"),
    ("boolean OR/NOT", "Zollverein OR naive NOT committee"),
    ("CJK, 3+ characters (trigram)", "国会図書館"),
    ("CJK, 2 characters (scan)", "東京"),
    ("CJK, 2 characters, rare (full scan)", "図書"),
    ("no match", "xylophonist"),
]


def build(path: Path, pages: int, words: int, seed: int) -> tuple[float, int]:
    """Index ``pages`` generated pages as documents of 1 to 8 pages; seconds, documents."""
    from ocrwatch.db import Database
    from ocrwatch.domain import PageText
    from ocrwatch.index import store_result
    from ocrwatch.jobs import JobQueue

    rng = random.Random(seed)
    db = Database(path)
    jobs = JobQueue(db)
    start = time.perf_counter()
    n = docs = 0
    try:
        while n < pages:
            count = min(rng.randint(1, 8), pages - n)
            texts = [make_page(rng, n + i, words) for i in range(count)]
            n += count
            docs += 1
            body = "\f".join(texts).encode("utf-8")
            sha = hashlib.sha256(body).hexdigest()
            source = Path(f"/inbox/synthetic/doc-{docs:06d}.pdf")
            jobs.offer(source, len(body), docs, sha)
            job = jobs.claim()
            assert job is not None and job.path == source
            store_result(db, job.id, [PageText(markdown=t, text=t) for t in texts],
                         engine="synthetic", md_path=source.with_suffix(".md"),
                         txt_path=source.with_suffix(".txt"), sha256=sha)
    finally:
        db.close()
    return time.perf_counter() - start, docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--words", type=int, default=250, help="words per page (default 250)")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs of each query")
    parser.add_argument("--limit", type=int, default=20, help="hits per query, as the CLI")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)

    import sqlite3

    from ocrwatch.db import Database
    from ocrwatch.index import search

    rows: list[tuple[str, str, int, int, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="ocrwatch-search-") as tmp:
        path = Path(tmp) / "index.sqlite3"
        build_s, docs = build(path, args.pages, args.words, args.seed)
        size_mb = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 1e6
        print(f"indexed {args.pages} pages in {build_s:.1f} s", file=sys.stderr)
        db = Database(path, readonly=True)  # what `ocrwatch search` opens
        try:
            for kind, query in QUERIES:
                matches = len(search(db, query, limit=10**9))  # also warms the cache
                hits = len(search(db, query, limit=args.limit))
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    search(db, query, limit=args.limit)
                    times.append(time.perf_counter() - start)
                rows.append((kind, query, matches, hits, median(times) * 1000,
                             max(times) * 1000))
        finally:
            db.close()

    lines = header(
        f"ocrwatch search latency: {args.pages} synthetic pages",
        [
            f"SQLite {sqlite3.sqlite_version}; index built through JobQueue.offer/claim + "
            f"store_result: {docs} documents of 1-8 pages, {args.words} words a page, "
            "9 pages in 10 in six European languages, 1 in 10 Chinese or Japanese",
            f"build: {build_s:.1f} s ({args.pages / build_s:.0f} pages/s), files on disk "
            f"{size_mb:.0f} MB",
            f"latency: ocrwatch.index.search(db, query, limit={args.limit}) on a warm cache, "
            f"median and max of {args.repeats} runs",
        ],
    )
    lines += ["", "| query kind | query | pages matching | hits returned | median ms | max ms |",
              "|---|---|--:|--:|--:|--:|"]
    for kind, query, matches, hits, med, worst in rows:
        shown = query.replace("|", "\\|")
        lines.append(f"| {kind} | `{shown}` | {matches} | {hits} | {med:.2f} | {worst:.2f} |")
    print("\n".join(lines))
    target = save("search.txt", lines, args.out)
    print(f"saved to {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
