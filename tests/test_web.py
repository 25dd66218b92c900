"""The search page's server over real HTTP on 127.0.0.1: token, Host, filters, thumbnails,
opening hits, and that no request writes anything."""

from __future__ import annotations

import json
import os
import stat
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from helpers import text_page, wait_for
from search_site import Site, serve, site

from ocrwatch.config import Config
from ocrwatch.daemon import Daemon
from ocrwatch.pages.thumbs import MAX_BYTES
from ocrwatch.testing.fake import FakeEngine
from ocrwatch.web.params import token_file

__all__ = ["site"]  # the fixture


def test_listens_on_loopback_with_a_private_token_file(site: Site) -> None:
    assert site.server._httpd is not None
    assert site.server._httpd.server_address[0] == "127.0.0.1"
    assert site.server.url.startswith(f"http://127.0.0.1:{site.server.port}/?token=")
    assert len(site.server.token) >= 40
    saved = token_file()
    assert saved.read_text().strip() == site.server.url
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert stat.S_IMODE(saved.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("path", ["/", "/api/search?q=fake", "/api/folders", "/api/recent",
                                  "/thumb/1/1",
                                  "/static/app.js"])
def test_every_route_needs_the_token(site: Site, path: str) -> None:
    status, _, body = site.request("GET", path, token=False)
    assert status == 403 and b"token" in body
    token = site.server.token
    wrong = ("y" if token.startswith("x") else "x") + token[1:]  # never the token itself
    status, _, _ = site.request("GET", path, token=False,
                                headers={"X-Ocrwatch-Token": wrong})
    assert status == 403


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1",
                                  "localhost.evil.example:{port}", ""])
def test_a_foreign_host_is_refused_even_with_the_token(site: Site, host: str) -> None:
    status, _, body = site.request("GET", "/api/search?q=fake",
                                   host=host.format(port=site.server.port))
    assert status == 403 and b"Host" in body


def test_the_token_moves_into_a_cookie(site: Site) -> None:
    status, headers, _ = site.request("GET", f"/?token={site.server.token}", token=False)
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    status, headers, body = site.request("GET", "/", token=False,
                                         headers={"Cookie": cookie.split(";")[0]})
    assert status == 200 and b"ocrwatch search" in body
    assert "default-src 'self'" in headers["content-security-policy"]


def test_hits_carry_name_folder_page_date_snippet_and_thumbnail(site: Site) -> None:
    reply = site.api("/api/search?q=%22report.pdf+page+2%22")
    assert [(h["name"], h["folder"], h["page"], h["pages"]) for h in reply["hits"]] == [
        ("harbour report.pdf", "inbox/letters", 2, 3)]
    hit = reply["hits"][0]
    assert "harbour <mark>report.pdf page 2</mark> (" in hit["snippet"]
    assert hit["date"] and hit["date"][:2] == "20"
    status, headers, body = site.request("GET", hit["thumb"])
    assert status == 200 and headers["content-type"] == "image/webp"
    assert body[:4] == b"RIFF" and 0 < len(body) <= MAX_BYTES


def test_recent_files_newest_first_with_thumbnails(site: Site) -> None:
    from helpers import text_page, wait_for

    reply = site.api("/api/recent")
    assert reply["recent"] and not reply["more"]
    assert sorted(h["name"] for h in reply["hits"]) == ["harbour report.pdf", "note.jpg",
                                                        "receipt 2024.png"]
    report = next(h for h in reply["hits"] if h["name"] == "harbour report.pdf")
    assert (report["page"], report["pages"], report["folder"]) == (1, 3, "inbox/letters")
    for hit in reply["hits"]:
        status, _, body = site.request("GET", hit["thumb"])
        assert status == 200 and body[:4] == b"RIFF"
    # A file written anew is read again, and comes first.
    text_page(["a new receipt"]).save(site.files["receipt"])
    wait_for(lambda: site.api("/api/recent")["hits"][0]["thumb"] not in
             {h["thumb"] for h in reply["hits"]}, 30, "the receipt read again")
    names = [h["name"] for h in site.api("/api/recent")["hits"]]
    assert names[0] == "receipt 2024.png" and len(names) == 3
    assert [h["name"] for h in site.api("/api/recent?per=1")["hits"]] == ["receipt 2024.png"]
    assert site.request("GET", "/api/recent?per=0")[0] == 400
    assert site.request("GET", "/api/recent")[1]["cache-control"] == "no-store"


def test_thumbnails_are_kept_by_the_browser_under_their_content_version(site: Site) -> None:
    hit = site.api("/api/search?q=%22report.pdf+page+2%22")["hits"][0]
    path, _, version = hit["thumb"].partition("?v=")
    assert len(version) == 16 and path == f"/thumb/{hit['job_id']}/2"
    status, headers, body = site.request("GET", hit["thumb"])
    assert status == 200 and "immutable" in headers["cache-control"]
    assert "max-age=31536000" in headers["cache-control"]
    etag = headers["etag"]
    assert etag == f'"{version}"'
    # Asked again with its ETag: nothing sent but the answer that it is unchanged.
    status, headers, again = site.request("GET", hit["thumb"], headers={"If-None-Match": etag})
    assert status == 304 and again == b"" and headers["etag"] == etag
    status, _, again = site.request("GET", hit["thumb"], headers={"If-None-Match": '"other"'})
    assert status == 200 and again == body
    # Without the version (or with an old one) it is checked again each time.
    for unversioned in (path, path + "?v=0123456789abcdef"):
        status, headers, again = site.request("GET", unversioned)
        assert status == 200 and again == body
        assert headers["cache-control"] == "private, no-cache" and headers["etag"] == etag
    # The answers to searches are never kept.
    _, headers, _ = site.request("GET", "/api/search?q=fake")
    assert headers["cache-control"] == "no-store"


def test_filters_and_names(site: Site) -> None:
    folder = str(site.inbox / "letters")
    everything = site.api("/api/search?q=fake&per=100")["hits"]
    assert len(everything) == 5  # 1 + 3 + 1 pages
    in_letters = site.api(f"/api/search?q=fake&per=100&folder={folder}")["hits"]
    assert {h["name"] for h in in_letters} == {"harbour report.pdf", "note.jpg"}
    pdfs = site.api("/api/search?q=fake&per=100&type=pdf")["hits"]
    assert {h["name"] for h in pdfs} == {"harbour report.pdf"}
    by_name = site.api("/api/search?name=receipt")["hits"]
    assert [h["name"] for h in by_name] == ["receipt 2024.png"]
    by_folder_name = site.api("/api/search?name=taxes")["hits"]
    assert [h["name"] for h in by_folder_name] == ["receipt 2024.png"]
    assert site.api("/api/search?q=fake&from=2999-01-01")["hits"] == []
    assert len(site.api("/api/search?q=fake&per=100&to=2999-01-01")["hits"]) == 5
    folders = site.api("/api/folders")["folders"]
    assert [(f["label"], f["depth"]) for f in folders] == [
        ("inbox", 0), ("inbox/letters", 1), ("inbox/taxes", 1)]
    assert folders[1]["path"] == folder


def test_the_folder_filter_is_the_watched_folders_tree(site: Site, tmp_path: Path) -> None:
    """Only folders inside an inbox, named from it; an inbox with nothing read yet is
    there too; files read from elsewhere add neither their folder nor the ones above."""
    from ocrwatch.web.server import SearchServer

    empty = tmp_path / "scans"
    empty.mkdir()
    # The letters folder watched alone: the files beside it are now outside every inbox.
    server = SearchServer(site.server.database, site.server.thumbs,
                          inbox=[site.inbox / "letters", empty], write_token_file=False)
    with server:
        conn = urllib.request.Request(
            f"http://127.0.0.1:{server.port}/api/folders",
            headers={"X-Ocrwatch-Token": server.token})
        with urllib.request.urlopen(conn, timeout=10) as reply:
            folders = json.loads(reply.read())["folders"]
    assert [(f["label"], f["depth"], f["path"]) for f in folders] == [
        ("letters", 0, str(site.inbox / "letters")), ("scans", 0, str(empty))]


def test_pages_of_hits(site: Site) -> None:
    first = site.api("/api/search?q=fake&per=2&page=1")
    second = site.api("/api/search?q=fake&per=2&page=2")
    third = site.api("/api/search?q=fake&per=2&page=3")
    assert first["more"] and second["more"] and not third["more"]
    seen = [(h["job_id"], h["page"]) for r in (first, second, third) for h in r["hits"]]
    assert len(seen) == len(set(seen)) == 5


def test_bad_queries_get_a_plain_answer(site: Site) -> None:
    for path in ("/api/search?q=%22open", "/api/search?q=x&from=yesterday",
                 "/api/search?q=x&type=exe", "/api/search?q=x&page=two"):
        status, _, body = site.request("GET", path)
        assert status == 400 and json.loads(body)["error"], path


def test_open_a_hit_records_the_opener(site: Site) -> None:
    hit = site.api("/api/search?q=%22report.pdf+page+2%22")["hits"][0]
    body = json.dumps({"job_id": hit["job_id"], "page": hit["page"], "what": "original"})
    status, _, _ = site.request("POST", "/api/open", body=body.encode(),
                                headers={"Content-Type": "application/json"})
    assert status == 200
    body = json.dumps({"job_id": hit["job_id"], "page": 2, "what": "md"})
    site.request("POST", "/api/open", body=body.encode(),
                 headers={"Content-Type": "application/json"})
    assert site.opened == [(site.files["report"], 2),
                           (site.inbox / "letters" / "harbour report.md", None)]


def test_only_files_in_the_index_are_served_or_opened(site: Site) -> None:
    for job_id in (0, 999):
        body = json.dumps({"job_id": job_id, "page": 1}).encode()
        status, _, _ = site.request("POST", "/api/open", body=body,
                                    headers={"Content-Type": "application/json"})
        assert status == 404
        assert site.request("GET", f"/thumb/{job_id}/1")[0] == 404
    for path in ("/static/../../../etc/passwd", "/static/index.html/..", "/../index.sqlite3",
                 "/thumb/1/../../x"):
        assert site.request("GET", path)[0] == 404
    # A form from another site cannot post JSON without a preflight; plain forms are refused.
    status, _, _ = site.request("POST", "/api/open", body=b"job_id=1",
                                headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415
    assert site.request("PUT", "/api/open")[0] == 405
    assert site.request("DELETE", "/")[0] == 405
    assert site.opened == []


def test_no_request_writes_to_the_index(site: Site) -> None:
    db = site.server.database
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size)
              for p in db.parent.glob(db.name + "*")}
    for path in ("/api/search?q=fake", "/api/search?name=report", "/api/folders",
                 "/api/recent"):
        site.api(path)
    assert site.server.db.query("PRAGMA query_only")[0][0] == 1
    after = {p.name: (p.stat().st_mtime_ns, p.stat().st_size)
             for p in db.parent.glob(db.name + "*")}
    assert before == after
    assert oct(os.stat(db).st_mode & 0o077) == "0o0"  # other users cannot read the index


def test_the_tray_opens_the_daemons_page(tmp_path: Path, home: Path) -> None:
    from ocrwatch import tray
    from ocrwatch.config import Config
    from ocrwatch.daemon import Daemon
    from ocrwatch.testing.fake import FakeEngine
    from ocrwatch.web.server import for_daemon

    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                    engine="fake", cache_dir=tmp_path / "cache")
    opened: list[str] = []
    with Daemon(config, engine=FakeEngine(), search_page=for_daemon) as daemon:
        tray.TrayController(daemon, opener=lambda p: opened.append(str(p))).open_search()
        # The browser is handed a private page with a one-time code, never the token.
        assert len(opened) == 1 and opened[0].startswith("file://")
        launch = Path(urllib.parse.urlsplit(opened[0]).path)
        assert os.stat(launch).st_mode & 0o777 == 0o600 and "?code=" in launch.read_text()
        base, token = daemon.web_url().split("?token=")
        request = urllib.request.Request(base + "api/folders",
                                         headers={"X-Ocrwatch-Token": token})
        with urllib.request.urlopen(request, timeout=10) as reply:
            # The inbox, with nothing read in it yet.
            assert json.load(reply)["folders"] == [
                {"path": str(tmp_path / "inbox"), "label": "inbox", "depth": 0}]
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(base, timeout=5)  # closed with the daemon


def test_a_file_read_without_a_markdown_sidecar_opens_its_txt(tmp_path: Path,
                                                             home: Path) -> None:
    """With ``outputs = ["txt"]`` a hit and a recent file still have their text to open:
    the page's "text" link opens the .txt (before, no link, as no .md was recorded)."""
    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                    settle_seconds=0.2, engine="fake", cache_dir=tmp_path / "cache",
                    outputs=["txt"])
    (tmp_path / "inbox").mkdir()
    letter = tmp_path / "inbox" / "letter.png"
    text_page(["harbour"]).save(letter)
    with Daemon(config, engine=FakeEngine()) as d, serve(config, d.thumbs, {}) as site:
        wait_for(lambda: (j := d.jobs.known(letter)) is not None and j.state == "done", 30,
                 "letter read")
        hit = site.api("/api/search?q=fake")["hits"][0]
        recent = site.api("/api/recent")["hits"][0]
        assert hit["sidecar"] is True and recent["sidecar"] is True
        body = json.dumps({"job_id": hit["job_id"], "page": 1, "what": "md"})
        status, _, _ = site.request("POST", "/api/open", body=body.encode(),
                                    headers={"Content-Type": "application/json"})
        assert status == 200
        assert site.opened == [(tmp_path / "inbox" / "letter.txt", None)]
        assert not (tmp_path / "inbox" / "letter.md").exists()
