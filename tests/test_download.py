"""The real download code against an HTTP server on 127.0.0.1 (no internet needed)."""

from __future__ import annotations

import inspect
import io
import logging
import socket

import numpy as np
import pytest
import torch

from calibrepro import datasets
from calibrepro.download import (
    _file_mode,
    USER_AGENT,
    ChecksumError,
    DownloadError,
    fetch,
    parse_checksum,
    rewrite_url,
    verify_checksum,
)
from calibrepro.zoo import Download
from servers import REALDATA, cifar_tarball_bytes, md5_hex, random_cifar, sha256_hex

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB: several chunks


def leftovers(folder):
    """Everything in ``folder`` (temporary .part files included)."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_checksum_ok_writes_the_file_and_sends_a_user_agent(file_server, tmp_path):
    url = file_server.add_file("/files/blob.bin", PAYLOAD)
    target = tmp_path / "out" / "blob.bin"
    result = fetch(Download(url, f"sha256:{sha256_hex(PAYLOAD)}", "blob.bin"), target, backoff=0)
    assert result == target
    assert target.read_bytes() == PAYLOAD
    assert leftovers(target.parent) == ["blob.bin"]
    assert file_server.user_agents[-1] == USER_AGENT
    assert target.stat().st_mode & 0o777 == _file_mode()  # as any new file under the umask, not mkstemp's 0600


def test_md5_and_sha256_prefix_pins(file_server, tmp_path):
    url = file_server.add_file("/blob", PAYLOAD)
    fetch(Download(url, f"md5:{md5_hex(PAYLOAD)}", "a"), tmp_path / "a", backoff=0)
    fetch(Download(url, f"sha256-prefix:{sha256_hex(PAYLOAD)[:8]}", "b"), tmp_path / "b", backoff=0)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes() == PAYLOAD
    with pytest.raises(ChecksumError, match="expected sha256-prefix:00000000"):
        fetch(Download(url, "sha256-prefix:00000000", "c"), tmp_path / "c", backoff=0)
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_redirects_are_followed(file_server, tmp_path, code):
    file_server.add_file("/real/location.bin", PAYLOAD)
    url = file_server.add_redirect("/moved.bin", file_server.url("/real/location.bin"), code=code)
    target = tmp_path / "moved.bin"
    fetch(Download(url, f"sha256:{sha256_hex(PAYLOAD)}", "moved.bin"), target, backoff=0)
    assert target.read_bytes() == PAYLOAD
    assert file_server.requests == ["/moved.bin", "/real/location.bin"]


def test_wrong_checksum_names_url_and_both_checksums_and_leaves_no_file(file_server, tmp_path):
    url = file_server.add_file("/blob.bin", PAYLOAD)
    wrong = "sha256:" + "0" * 64
    target = tmp_path / "blob.bin"
    with pytest.raises(ChecksumError) as error:
        fetch(Download(url, wrong, "blob.bin"), target, backoff=0)
    message = str(error.value)
    assert url in message and wrong in message and sha256_hex(PAYLOAD) in message
    assert leftovers(tmp_path) == []
    assert file_server.count("/blob.bin") == 1  # a mismatch is not retried


def test_wrong_md5_reports_md5(file_server, tmp_path):
    url = file_server.add_file("/blob.bin", PAYLOAD)
    with pytest.raises(ChecksumError, match=f"got md5:{md5_hex(PAYLOAD)}"):
        fetch(Download(url, "md5:" + "f" * 32, "blob.bin"), tmp_path / "blob.bin", backoff=0)
    assert leftovers(tmp_path) == []


def test_connection_dropped_mid_file_leaves_no_file_and_a_rerun_succeeds(file_server, tmp_path):
    pin = f"sha256:{sha256_hex(PAYLOAD)}"
    url = file_server.add_truncated("/big.bin", PAYLOAD, cut=100_000)
    target = tmp_path / "big.bin"
    with pytest.raises(DownloadError) as error:
        fetch(Download(url, pin, "big.bin"), target, retries=1, backoff=0)
    assert url in str(error.value) and "100000" in str(error.value)
    assert not isinstance(error.value, ChecksumError)
    assert leftovers(tmp_path) == []
    assert file_server.count("/big.bin") == 2  # one retry
    file_server.add_file("/big.bin", PAYLOAD)  # the server recovers: running again succeeds
    fetch(Download(url, pin, "big.bin"), target, backoff=0)
    assert target.read_bytes() == PAYLOAD


def test_a_transient_failure_is_retried(file_server, tmp_path):
    url = file_server.add_flaky("/flaky.bin", PAYLOAD, failures=2)
    target = tmp_path / "flaky.bin"
    fetch(Download(url, f"sha256:{sha256_hex(PAYLOAD)}", "flaky.bin"), target, retries=2, backoff=0)
    assert target.read_bytes() == PAYLOAD
    assert file_server.count("/flaky.bin") == 3


def test_http_errors(file_server, tmp_path):
    missing = file_server.url("/nothing-here")
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch(Download(missing, "sha256:" + "0" * 64, "x"), tmp_path / "x", retries=3, backoff=0)
    assert file_server.count("/nothing-here") == 1  # a 404 is final
    busy = file_server.add_status("/busy", 503)
    with pytest.raises(DownloadError, match=r"failed after 3 attempt\(s\).*HTTP 503"):
        fetch(Download(busy, "sha256:" + "0" * 64, "y"), tmp_path / "y", retries=2, backoff=0)
    assert file_server.count("/busy") == 3
    assert leftovers(tmp_path) == []


def test_connection_refused_names_the_url(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/file.bin"
    with pytest.raises(DownloadError, match=f"{url}.*cannot connect"):
        fetch(Download(url, "sha256:" + "0" * 64, "file.bin"), tmp_path / "file.bin", retries=1, backoff=0, timeout=5)
    assert leftovers(tmp_path) == []


def test_mirror_rewrites_the_url_but_keeps_the_checksum(file_server, tmp_path):
    file_server.add_file("/mirror/weights/model-abc.pth", PAYLOAD)
    pin = Download("https://origin.invalid/releases/weights/model-abc.pth", f"sha256:{sha256_hex(PAYLOAD)}", "w")
    mirrors = {"https://origin.invalid/releases": file_server.url("/mirror"), "https://other.invalid": "http://x"}
    fetch(pin, tmp_path / "w", mirrors=mirrors, backoff=0)
    assert (tmp_path / "w").read_bytes() == PAYLOAD
    file_server.add_file("/mirror/weights/bad.pth", b"not the pinned bytes")
    bad = Download("https://origin.invalid/releases/weights/bad.pth", f"sha256:{sha256_hex(PAYLOAD)}", "v")
    with pytest.raises(ChecksumError, match="mirror of https://origin.invalid/releases/weights/bad.pth"):
        fetch(bad, tmp_path / "v", mirrors=mirrors, backoff=0)
    assert not (tmp_path / "v").exists()


def test_a_mirror_to_a_local_folder_copies_the_file_and_checks_its_pin(tmp_path, monkeypatch):
    """Air-gapped: a replacement without a scheme is a folder; the copy is verified like a download."""
    folder = tmp_path / "copies"
    folder.mkdir()
    (folder / "communities.data").write_bytes(PAYLOAD)
    (folder / "other.data").write_bytes(b"not the pinned bytes")
    monkeypatch.chdir(tmp_path)  # a relative folder is taken from the working directory
    mirrors = {"https://archive.invalid/communities/": "copies/"}
    assert rewrite_url("https://archive.invalid/communities/a b.data", mirrors) == (folder / "a b.data").as_uri()
    pin = Download("https://archive.invalid/communities/communities.data", f"sha256:{sha256_hex(PAYLOAD)}", "c")
    fetch(pin, tmp_path / "out" / "c", mirrors=mirrors, backoff=0, progress=False)
    assert (tmp_path / "out" / "c").read_bytes() == PAYLOAD
    bad = Download("https://archive.invalid/communities/other.data", f"sha256:{sha256_hex(PAYLOAD)}", "o")
    with pytest.raises(ChecksumError, match="mirror of https://archive.invalid/communities/other.data"):
        fetch(bad, tmp_path / "out" / "o", mirrors=mirrors, backoff=0, progress=False)
    missing = Download("https://archive.invalid/communities/gone.data", f"sha256:{sha256_hex(PAYLOAD)}", "g")
    with pytest.raises(DownloadError, match=f"{folder / 'gone.data'}: no such file, the local copy of "
                                            "https://archive.invalid/communities/gone.data"):
        fetch(missing, tmp_path / "out" / "g", mirrors=mirrors, retries=3, backoff=60, progress=False)  # no retries
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["c"]


def test_rewrite_url_longest_prefix_wins():
    mirrors = {"https://github.com/": "http://m/gh/", "https://github.com/chenyaofo/": "http://m/cy/"}
    assert rewrite_url("https://github.com/chenyaofo/x.pt", mirrors) == "http://m/cy/x.pt"
    assert rewrite_url("https://github.com/other/x.pt", mirrors) == "http://m/gh/other/x.pt"
    assert rewrite_url("https://example.org/x", mirrors) == "https://example.org/x"
    assert rewrite_url("https://example.org/x", None) == "https://example.org/x"


def test_an_existing_verified_file_is_not_downloaded_again(file_server, tmp_path):
    url = file_server.add_file("/blob.bin", PAYLOAD)
    target = tmp_path / "blob.bin"
    target.write_bytes(PAYLOAD)
    fetch(Download(url, f"sha256:{sha256_hex(PAYLOAD)}", "blob.bin"), target, backoff=0)
    assert file_server.requests == []
    target.write_bytes(b"corrupted")
    fetch(Download(url, f"sha256:{sha256_hex(PAYLOAD)}", "blob.bin"), target, backoff=0)
    assert target.read_bytes() == PAYLOAD and file_server.count("/blob.bin") == 1


def test_malformed_pins_fail_before_any_transfer(file_server, tmp_path):
    url = file_server.add_file("/blob.bin", PAYLOAD)
    for pin in ["abc", "sha1:" + "0" * 40, "sha256:XYZ", "sha256:" + "0" * 63, "unpinned:"]:
        with pytest.raises(ValueError):
            fetch(Download(url, pin, "blob.bin"), tmp_path / "blob.bin", backoff=0)
    assert file_server.requests == []
    assert parse_checksum("sha256-prefix:12fca82f") == ("sha256-prefix", "12fca82f")


def test_unpinned_files_are_accepted_with_a_warning(file_server, tmp_path, caplog):
    url = file_server.add_file("/archive.zip", PAYLOAD)
    with caplog.at_level(logging.WARNING, logger="calibrepro.download"):
        fetch(Download(url, "unpinned:no checksum published", "a.zip"), tmp_path / "a.zip", backoff=0)
    assert (tmp_path / "a.zip").read_bytes() == PAYLOAD
    assert sha256_hex(PAYLOAD) in caplog.text and "no published checksum" in caplog.text


def test_google_drive_urls_go_through_gdown(monkeypatch, tmp_path):
    import gdown

    calls = []
    real_signature = inspect.signature(gdown.download)

    def fake_download(url, output, **kwargs):
        real_signature.bind(url=url, output=output, **kwargs)  # only arguments the installed gdown accepts
        calls.append(url)
        with open(output, "wb") as handle:
            handle.write(PAYLOAD)
        return output

    monkeypatch.setattr(gdown, "download", fake_download)
    pin = Download("https://drive.google.com/uc?id=FILEID&export=download", f"sha256:{sha256_hex(PAYLOAD)}", "d")
    fetch(pin, tmp_path / "d", backoff=0)
    assert calls == [pin.url] and (tmp_path / "d").read_bytes() == PAYLOAD
    with pytest.raises(ChecksumError):
        fetch(Download(pin.url, "sha256:" + "1" * 64, "e"), tmp_path / "e", backoff=0)
    monkeypatch.setattr(gdown, "download", lambda url, output, **kwargs: None)
    with pytest.raises(DownloadError, match="Google Drive download failed"):
        fetch(Download(pin.url, "sha256:" + "1" * 64, "f"), tmp_path / "f", retries=1, backoff=0)
    assert leftovers(tmp_path) == ["d"]


def test_a_mirror_replaces_google_drive_by_plain_http(file_server, tmp_path):
    file_server.add_file("/mirror/state_dicts.zip", PAYLOAD)
    drive = "https://drive.google.com/uc?id=FILEID&export=download"
    pin = Download(drive, f"sha256:{sha256_hex(PAYLOAD)}", "s.zip")
    fetch(pin, tmp_path / "s.zip", mirrors={drive: file_server.url("/mirror/state_dicts.zip")}, backoff=0)
    assert (tmp_path / "s.zip").read_bytes() == PAYLOAD


def test_weights_file_and_cifar_tarball_round_trip(file_server, tmp_path):
    state_dict = torch.nn.Linear(4, 3).state_dict()
    buffer = io.BytesIO()
    torch.save(state_dict, buffer)
    weights = buffer.getvalue()
    images, labels = random_cifar(7, 10, seed=1)
    tarball = cifar_tarball_bytes("cifar10", images, labels)
    weights_url = file_server.add_file("/w/linear-abc.pth", weights)
    data_url = file_server.add_file("/d/cifar-10-python.tar.gz", tarball)
    w = fetch(Download(weights_url, f"sha256-prefix:{sha256_hex(weights)[:8]}", "w"), tmp_path / "w.pth", backoff=0)
    d = fetch(Download(data_url, f"md5:{md5_hex(tarball)}", "d"), tmp_path / "c.tar.gz", backoff=0)
    loaded = torch.load(w, weights_only=True)
    assert all(torch.equal(loaded[k], state_dict[k]) for k in state_dict)
    got_images, got_labels = datasets.read_cifar_test(d, "cifar10")
    assert np.array_equal(got_images, images) and np.array_equal(got_labels, labels)
    assert verify_checksum(d, f"md5:{md5_hex(tarball)}") == sha256_hex(tarball)


def test_a_stalled_server_times_out_with_a_message_saying_so(file_server, tmp_path):
    url = file_server.add_stalled("/hung.bin", PAYLOAD, cut=5000, stall=30)
    with pytest.raises(DownloadError) as error:
        fetch(Download(url, f"sha256:{sha256_hex(PAYLOAD)}", "hung.bin"), tmp_path / "hung.bin",
              timeout=0.5, retries=1, backoff=0, progress=False)
    message = str(error.value)
    assert f"{url}: the server stalled: nothing received for 0.5 s after 5000 bytes (downloads.timeout)" in message
    assert "failed after 2 attempt(s)" in message and file_server.count("/hung.bin") == 2
    assert leftovers(tmp_path) == []


def test_a_body_cut_without_content_length_fails_the_checksum_and_keeps_nothing(file_server, tmp_path):
    url = file_server.add_unsized("/cut.bin", PAYLOAD, cut=100_000)
    target = tmp_path / "cut.bin"
    with pytest.raises(ChecksumError) as error:
        fetch(Download(url, f"sha256:{sha256_hex(PAYLOAD)}", "cut.bin"), target, backoff=0, progress=False)
    assert f"checksum mismatch for {url} (saved as {target})" in str(error.value)
    assert f"got sha256:{sha256_hex(PAYLOAD[:100_000])} (100000 bytes); the downloaded file was deleted" in str(error.value)
    assert leftovers(tmp_path) == []


def test_a_redirect_loop_is_a_clear_error(file_server, tmp_path):
    url = file_server.add_redirect("/a.bin", file_server.url("/b.bin"))
    file_server.add_redirect("/b.bin", url)
    with pytest.raises(DownloadError) as error:
        fetch(Download(url, "sha256:" + "0" * 64, "a.bin"), tmp_path / "a.bin", retries=2, backoff=0, progress=False)
    assert str(error.value) == (
        f"{url}: redirect loop or too many redirects (gave up at HTTP 302 from {url}); check the URL and downloads.mirrors"
    )
    assert file_server.count("/a.bin") < 10 and leftovers(tmp_path) == []  # not retried


@pytest.mark.slow
@pytest.mark.skipif(not (REALDATA / "akamaster").is_dir(), reason="needs ../shared/realdata (real akamaster weights)")
def test_the_snakemake_download_rule_goes_through_downloads_mirrors(file_server, tmp_path):
    """A config whose pinned weights are served only by a 127.0.0.1 mirror: the rule fetches and verifies them."""
    from calibrepro.zoo import akamaster
    from workflow_helpers import run_snakemake, write_config

    pin = akamaster.PINS[("cifar10", "resnet20")].weights
    origin = f"https://raw.githubusercontent.com/{akamaster.REPO}/{akamaster.COMMIT}/pretrained_models"
    config = {
        "models": {"cifar10": {"resnet20": {"source": "akamaster"}}},
        "downloads": {"dir": "results/downloads", "mirrors": {origin: file_server.mount("/mirror", REALDATA / "akamaster")}},
    }
    target = tmp_path / "results" / "downloads" / pin.path
    target.parent.mkdir(parents=True)
    stale = target.parent / f".{target.name}.1a2b3c4d.part"  # left by a download killed before
    stale.write_bytes(b"\0" * 1024)
    result = run_snakemake(tmp_path, f"results/downloads/{pin.path}",
                           "--configfile", str(write_config(tmp_path / "c.yaml", config)), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sha256_hex(target.read_bytes()) == pin.checksum.removeprefix("sha256:")
    assert file_server.requests == [f"/mirror/{target.name}"]
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]

    config["downloads"]["mirrors"] = {origin: file_server.url("/wrong")}  # a mirror serving other bytes
    file_server.add_file(f"/wrong/{target.name}", b"not the pinned file")
    target.unlink()
    result = run_snakemake(tmp_path, f"results/downloads/{pin.path}",
                           "--configfile", str(write_config(tmp_path / "c.yaml", config)), timeout=300)
    assert result.returncode != 0
    assert f"mirror of {pin.url}" in result.stderr and "checksum mismatch" in result.stderr
    assert leftovers(target.parent) == []


def test_git_blob_sha1_pins_a_file_by_the_id_its_repository_tree_gives(tmp_path):
    from calibrepro.download import git_blob_sha1

    path = tmp_path / "hello.txt"
    path.write_bytes(b"hello\n")
    assert git_blob_sha1(path) == "ce013625030ba8dba906f756967f9e9ca394464a"  # `printf 'hello\n' | git hash-object --stdin`
    assert verify_checksum(path, "git-blob-sha1:ce013625030ba8dba906f756967f9e9ca394464a") == sha256_hex(b"hello\n")
    with pytest.raises(ChecksumError, match="expected git-blob-sha1:0{40}, got git-blob-sha1:ce0136"):
        verify_checksum(path, "git-blob-sha1:" + "0" * 40)
