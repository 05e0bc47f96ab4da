"""A local stand-in for the Hugging Face Hub on 127.0.0.1, for push/pull tests through the real client.

It implements only the routes huggingface_hub (2.x) calls for create_repo, create_branch, upload_folder
(validate-yaml, preupload, NDJSON commit, optionally as a PR), repo_info / model_info, list_repo_tree and
file HEAD/GET (hf_hub_download, snapshot_download), for model repos and (`repo_type="dataset"`) dataset repos.
Dataset repos are keyed `datasets/<org>/<name>` in `HubState.repos`, model repos by their plain id.
Every file is committed as a "regular" (base64) blob:
the server decides the upload mode in its preupload answer, so no LFS/Xet transfer is needed. Point the
client at it with HF_ENDPOINT. Writes need `Authorization: Bearer <token>`; tokens are counted, never stored.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

_KINDS = ("models", "datasets")


def repo_key(kind: str, repo_id: str) -> str:
    return repo_id if kind == "models" else f"{kind}/{repo_id}"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    private: bool
    refs: dict[str, str] = field(default_factory=dict)  # branch or refs/pr/N -> commit sha
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> {path: content}
    messages: dict[str, str] = field(default_factory=dict)
    prs: int = 0


class HubState:
    def __init__(self, token: str) -> None:
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.lock = threading.Lock()
        self.authorized_writes = 0
        self.requests: list[str] = []  # "METHOD path" of every request, for assertions

    def resolve(self, repo: Repo, rev: str) -> str | None:
        if rev in repo.refs:
            return repo.refs[rev]
        return rev if rev in repo.commits else None


class _Handler(BaseHTTPRequestHandler):
    state: HubState
    base_url: str

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    # -- helpers -------------------------------------------------------------------------------------
    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None, raw: bytes | None = None,
              head: bool = False) -> None:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _error(self, status: int, message: str, code: str | None = None) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, {"error": message}, headers)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _authorized(self) -> bool:
        ok = self.headers.get("Authorization") == f"Bearer {self.state.token}"
        if ok:
            self.state.authorized_writes += 1
        else:
            self._error(401, "Invalid credentials in Authorization header")
        return ok

    def _repo(self, repo_id: str) -> Repo | None:
        repo = self.state.repos.get(repo_id)
        if repo is None:
            self._error(404, f"Repository Not Found for url: {self.path}", "RepoNotFound")
        return repo

    def _commit_of(self, repo: Repo, rev: str) -> str | None:
        sha = self.state.resolve(repo, rev)
        if sha is None:
            self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return sha

    def _split(self) -> tuple[list[str], dict[str, list[str]]]:
        url = urlsplit(self.path)
        # split before unquoting: a revision like refs%2Fpr%2F1 is one segment
        return [unquote(p) for p in url.path.strip("/").split("/")], parse_qs(url.query)

    # -- verbs ---------------------------------------------------------------------------------------
    def do_POST(self) -> None:  # noqa: N802
        parts, query = self._split()
        self.state.requests.append(f"POST {'/'.join(parts)}")
        with self.state.lock:
            if parts[:3] == ["api", "repos", "create"]:
                return self._create_repo()
            if parts == ["api", "validate-yaml"]:
                return self._validate_yaml()
            if len(parts) >= 6 and parts[0] == "api" and parts[1] in _KINDS:
                repo_id, op, rev = repo_key(parts[1], f"{parts[2]}/{parts[3]}"), parts[4], "/".join(parts[5:])
                if op == "preupload":
                    return self._preupload(repo_id, rev)
                if op == "commit":
                    return self._commit(repo_id, rev, create_pr=query.get("create_pr") == ["1"])
                if op == "branch":
                    return self._branch(repo_id, rev)
            if len(parts) == 5 and parts[:2] == ["api", "models"] and parts[4] == "discussions":
                return self._open_pr(f"{parts[2]}/{parts[3]}")
        self._error(404, f"no route for POST {self.path}")

    def do_GET(self) -> None:  # noqa: N802
        self._get(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._get(head=True)

    def _get(self, head: bool) -> None:
        parts, _ = self._split()
        self.state.requests.append(f"{'HEAD' if head else 'GET'} {'/'.join(parts)}")
        with self.state.lock:
            if len(parts) >= 4 and parts[0] == "api" and parts[1] in _KINDS:
                repo_id = repo_key(parts[1], f"{parts[2]}/{parts[3]}")
                if len(parts) == 4:
                    return self._model_info(repo_id, "main")
                if parts[4] == "revision" and len(parts) >= 6:
                    return self._model_info(repo_id, "/".join(parts[5:]))
                if parts[4] == "tree" and len(parts) >= 6:
                    return self._tree(repo_id, parts[5])
                if parts[4] == "discussions" and len(parts) == 6:
                    return self._pr_details(repo_id, int(parts[5]))
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head)
            if len(parts) >= 6 and parts[0] == "datasets" and parts[3] == "resolve":
                return self._resolve(repo_key("datasets", f"{parts[1]}/{parts[2]}"), parts[4], "/".join(parts[5:]),
                                     head)
        self._error(404, f"no route for GET {self.path}")

    # -- routes --------------------------------------------------------------------------------------
    def _create_repo(self) -> None:
        if not self._authorized():
            return
        payload = json.loads(self._body())
        kind = (payload.get("type") or "model") + "s"
        if kind not in _KINDS:
            return self._error(400, "this test hub serves model and dataset repos only")
        if not payload.get("organization"):
            return self._error(400, "pass a namespaced repo id (org/name)")
        plain_id = f"{payload['organization']}/{payload['name']}"
        repo_id = repo_key(kind, plain_id)
        if repo_id in self.state.repos:
            # the real hub answers 409 with the url; create_repo(exist_ok=True) reads it
            message = "You already created this model repo"
            return self._send(409, {"error": message, "url": f"{self.base_url}/{repo_id}"},
                              {"X-Error-Message": message})
        repo = Repo(private=payload.get("visibility", "public") == "private" or bool(payload.get("private")))
        sha = hashlib.sha1(f"init {repo_id}".encode()).hexdigest()
        repo.commits[sha] = {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}
        repo.messages[sha] = "initial commit"
        repo.refs["main"] = sha
        self.state.repos[repo_id] = repo
        self._send(200, {"url": f"{self.base_url}/{repo_id}", "name": repo_id})

    def _validate_yaml(self) -> None:
        content = json.loads(self._body()).get("content", "")
        if content.startswith("---"):
            try:
                meta = yaml.safe_load(content.split("---", 2)[1])
            except yaml.YAMLError as exc:
                return self._send(400, {"errors": [{"message": f"invalid YAML: {exc}"}]})
            if not isinstance(meta, dict):
                return self._send(400, {"errors": [{"message": "metadata must be a mapping"}]})
        self._send(200, {"errors": [], "warnings": []})

    def _preupload(self, repo_id: str, rev: str) -> None:
        if not self._authorized() or (repo := self._repo(repo_id)) is None:
            return
        files = self.state.repos[repo_id].commits.get(self.state.resolve(repo, rev) or "", {})
        out = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                "oid": git_blob_sha1(files[f["path"]]) if f["path"] in files else None}
               for f in json.loads(self._body())["files"]]
        self._send(200, {"files": out})

    def _commit(self, repo_id: str, rev: str, create_pr: bool) -> None:
        if not self._authorized() or (repo := self._repo(repo_id)) is None:
            return
        if rev not in repo.refs:
            return self._error(404, f"Invalid rev id: {rev} (commits go to a branch)", "RevisionNotFound")
        parent = repo.refs[rev]
        lines = [json.loads(line) for line in self._body().splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            return self._error(400, "commit payload must start with a header line")
        files = dict(repo.commits[parent])
        for item in lines[1:]:
            value = item["value"]
            if item["key"] == "file":
                if value.get("encoding") != "base64":
                    return self._error(400, f"unsupported encoding for {value.get('path')}")
                files[value["path"]] = base64.b64decode(value["content"])
            elif item["key"] == "deletedFile":
                files.pop(value["path"], None)
            elif item["key"] == "deletedFolder":
                files = {p: c for p, c in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
            else:
                return self._error(400, f"this test hub does not take {item['key']!r} operations")
        summary = lines[0]["value"].get("summary", "")
        sha = hashlib.sha1(json.dumps([parent, summary, sorted((p, git_blob_sha1(c)) for p, c in files.items())])
                           .encode()).hexdigest()
        repo.commits[sha] = files
        repo.messages[sha] = summary
        pr_url = None
        if create_pr:
            repo.prs += 1
            repo.refs[f"refs/pr/{repo.prs}"] = sha
            pr_url = f"{self.base_url}/{repo_id}/discussions/{repo.prs}"
        else:
            repo.refs[rev] = sha
        self._send(200, {"commitUrl": f"{self.base_url}/{repo_id}/commit/{sha}", "commitOid": sha,
                         "pullRequestUrl": pr_url, "success": True})

    def _branch(self, repo_id: str, branch: str) -> None:
        if not self._authorized() or (repo := self._repo(repo_id)) is None:
            return
        start = json.loads(self._body() or b"{}").get("startingPoint") or "main"
        if branch in repo.refs:
            return self._error(409, f"Reference already exists: {branch}")
        if (sha := self._commit_of(repo, start)) is None:
            return
        repo.refs[branch] = sha
        self._send(200, {})

    def _open_pr(self, repo_id: str) -> None:
        """create_pull_request (what upload_folder(create_pr=True) calls first): a refs/pr/N ref at main."""
        if not self._authorized() or (repo := self._repo(repo_id)) is None:
            return
        if not json.loads(self._body()).get("pullRequest"):
            return self._error(400, "this test hub opens pull requests only, not discussions")
        repo.prs += 1
        repo.refs[f"refs/pr/{repo.prs}"] = repo.refs["main"]
        self._send(200, {"num": repo.prs, "url": f"{self.base_url}/{repo_id}/discussions/{repo.prs}"})

    def _pr_details(self, repo_id: str, num: int) -> None:
        if (repo := self._repo(repo_id)) is None:
            return
        if f"refs/pr/{num}" not in repo.refs:
            return self._error(404, f"Discussion {num} not found")
        self._send(200, {"title": f"PR {num}", "num": num, "author": {"name": "test"}, "status": "draft",
                         "createdAt": "2025-01-01T00:00:00.000Z", "repo": {"name": repo_id, "type": "model"},
                         "isPullRequest": True, "events": [], "changes": {"base": "refs/heads/main"},
                         "filesWithConflicts": []})

    def _model_info(self, repo_id: str, rev: str) -> None:
        if (repo := self._repo(repo_id)) is None or (sha := self._commit_of(repo, rev)) is None:
            return
        files = repo.commits[sha]
        plain_id = repo_id.removeprefix("datasets/")
        self._send(200, {"id": plain_id, "modelId": plain_id, "sha": sha, "private": repo.private,
                         "siblings": [{"rfilename": p} for p in sorted(files)], "tags": [], "downloads": 0})

    def _tree(self, repo_id: str, rev: str) -> None:
        if (repo := self._repo(repo_id)) is None or (sha := self._commit_of(repo, rev)) is None:
            return
        self._send(200, [{"type": "file", "path": p, "size": len(c), "oid": git_blob_sha1(c)}
                         for p, c in sorted(repo.commits[sha].items())])

    def _resolve(self, repo_id: str, rev: str, path: str, head: bool) -> None:
        if (repo := self._repo(repo_id)) is None or (sha := self._commit_of(repo, rev)) is None:
            return
        if path not in repo.commits[sha]:
            # like the real hub, name the commit: the client caches "no such file" and trusts it offline
            message = f"Entry not found: {path}"
            return self._send(404, {"error": message}, {"X-Error-Message": message, "X-Error-Code": "EntryNotFound",
                                                        "X-Repo-Commit": sha}, head=head)
        data = repo.commits[sha][path]
        self._send(200, raw=data, head=head,
                   headers={"X-Repo-Commit": sha, "ETag": f'"{git_blob_sha1(data)}"'})


@contextlib.contextmanager
def local_hub(token: str) -> Iterator[tuple[str, HubState]]:
    """Serve a fresh in-memory hub on a free 127.0.0.1 port; yields (endpoint URL, state)."""
    state = HubState(token)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    server.RequestHandlerClass = type("Handler", (_Handler,), {"state": state, "base_url": url})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield url, state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


if __name__ == "__main__":  # manual use: python -m tests.helpers.hub_server TOKEN
    import sys
    import time

    with local_hub(sys.argv[1] if len(sys.argv) > 1 else "test-token") as (endpoint, _):
        print(endpoint, flush=True)
        while True:
            time.sleep(3600)
