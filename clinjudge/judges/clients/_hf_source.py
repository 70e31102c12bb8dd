"""Where an in-process model's files are (``hf/``, ``hf-hub/``), and what they hold.

``hf/<path>`` names files on this machine only: a checkpoint folder (``config.json`` and
weights), a ``.gguf`` file, or a folder holding one ``.gguf``. Any other name is an error before
a run is stored or anything is sent; it is never read as a hub repository (``hf/models/mine``
with no such folder used to download the repository ``models/mine``). Downloading is asked for
by name: ``hf-hub/<org>/<name>`` or ``hf-hub/<org>/<name>/<file>.gguf``.

The response cache keys a model by what its files hold (:func:`model_fingerprint`), not by its
path, so replaced weights never answer with the old model's cached replies.

Light: no torch or transformers; huggingface_hub only when an ``hf-hub/`` model is fingerprinted.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from clinjudge.judges.clients._settings import ModelConfigError

LOCAL_PROVIDER = "hf"
"""Files on this machine; never the network."""
HUB_PROVIDER = "hf-hub"
"""A Hugging Face hub repository, downloaded (the explicit opt-in)."""

GGUF_MAGIC = b"GGUF"
WEIGHT_SUFFIXES = (".safetensors", ".bin")
"""Weights transformers loads from a checkpoint folder (shards included)."""
SIDE_SUFFIXES = (".json", ".jinja", ".txt", ".model", ".tiktoken")
"""Configuration, tokenizer and chat-template files of a checkpoint folder."""
GGUF_SIDE_FILES = (
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
"""Files beside a GGUF file that transformers also reads: only these, as a GGUF file may sit
in any folder (the working directory) among files that have nothing to do with it."""

_HUB_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ModelSource:
    """Where a model's files are.

    Args:
        location: A local folder, or a Hugging Face hub repository id.
        gguf_file: Name of a GGUF file inside ``location`` (None: a transformers checkpoint).
        local: ``location`` is on this machine: the hub is never asked.
    """

    location: str
    gguf_file: str | None = None
    local: bool = True

    def __str__(self) -> str:
        return f"{self.location}/{self.gguf_file}" if self.gguf_file else self.location

    @property
    def model(self) -> str:
        """The model string that names this source (``hf/...`` or ``hf-hub/...``)."""
        return f"{LOCAL_PROVIDER if self.local else HUB_PROVIDER}/{self}"


def resolve_source(name: str, *, hub: bool = False) -> ModelSource:
    """Where the model named after ``hf/`` (or ``hf-hub/``) lives; reads nothing from the network.

    Args:
        name: The model name after the provider.
        hub: ``hf-hub/``: ``name`` is a hub repository (``org/name``), or a GGUF file in one
            (``org/name/file.gguf``), checked for its form only.

    Raises:
        ModelConfigError: ``hf/``: no such path, or a path that holds no model (a file that
            is not GGUF, a folder without weights); ``hf-hub/``: not a repository id.
    """
    if hub:
        return _hub_source(name)
    path = Path(name).expanduser()
    if path.is_dir():
        return _folder_source(name, path)
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelConfigError(
                f"model hf/{name}: a file must be a .gguf checkpoint; give a checkpoint folder "
                "(config.json and weights) otherwise"
            )
        _check_gguf(name, path)
        return ModelSource(str(path.parent), path.name)
    if path.exists():
        raise ModelConfigError(f"model hf/{name}: not a regular file or folder")
    hint = ""
    if _hub_source_or_none(name) is not None:
        hint = (
            f"; if {name} is a Hugging Face hub repository, name it {HUB_PROVIDER}/{name} to "
            "download it"
        )
    raise ModelConfigError(
        f"model hf/{name}: no such file or folder ({Path(name).expanduser().absolute()}); hf/ "
        f"models are read from this machine only{hint}"
    )


def _folder_source(name: str, path: Path) -> ModelSource:
    """A checkpoint folder, or a folder holding exactly one GGUF file."""
    if (path / "config.json").is_file():
        if not any(p.name.endswith(WEIGHT_SUFFIXES) and p.is_file() for p in path.iterdir()):
            raise ModelConfigError(
                f"model hf/{name}: the folder has config.json but no weights (*.safetensors "
                "or *.bin)"
            )
        return ModelSource(str(path))
    ggufs = sorted(p.name for p in path.glob("*.gguf") if p.is_file())
    if len(ggufs) > 1:
        raise ModelConfigError(
            f"model hf/{name}: the folder holds several GGUF files ({', '.join(ggufs)}); "
            f"name one, e.g. hf/{Path(name) / ggufs[0]}"
        )
    if not ggufs:
        raise ModelConfigError(f"model hf/{name}: the folder has no config.json and no .gguf")
    _check_gguf(name, path / ggufs[0])
    return ModelSource(str(path), ggufs[0])


def _check_gguf(name: str, path: Path) -> None:
    """A ``.gguf`` name is not enough: the file must start as GGUF files do."""
    try:
        with path.open("rb") as file:
            magic = file.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ModelConfigError(f"model hf/{name}: cannot read {path}: {exc}") from exc
    if magic != GGUF_MAGIC:
        raise ModelConfigError(f"model hf/{name}: {path.name} is not a GGUF file")


def _hub_source_or_none(name: str) -> ModelSource | None:
    if _HUB_REPO.match(name):
        return ModelSource(name, local=False)
    parts = name.split("/")
    if len(parts) == 3 and _HUB_REPO.match("/".join(parts[:2])) and parts[2].endswith(".gguf"):
        return ModelSource("/".join(parts[:2]), parts[2], local=False)
    return None


def _hub_source(name: str) -> ModelSource:
    source = _hub_source_or_none(name)
    if source is None:
        raise ModelConfigError(
            f"model {HUB_PROVIDER}/{name}: a hub model is named {HUB_PROVIDER}/ORG/NAME or "
            f"{HUB_PROVIDER}/ORG/NAME/FILE.gguf; a local model is hf/PATH"
        )
    return source


def source_of(model: str) -> ModelSource:
    """The source of an ``hf/`` or ``hf-hub/`` model string (see :func:`resolve_source`).

    Args:
        model: ``hf/<path>`` or ``hf-hub/<repository>``.

    Raises:
        ModelConfigError: The model names no model (see :func:`resolve_source`).
    """
    provider, _, name = model.partition("/")
    return resolve_source(name, hub=provider.lower() == HUB_PROVIDER)


# -- what the files hold -----------------------------------------------------------------------

_DIGESTS: dict[tuple[str, int, int, int, int, int], str] = {}
"""SHA-256 of each file read so far, by path and stat: hashed once per process while the file
stays as it was."""
_REVISIONS: dict[str, str] = {}
"""Hub commit of each ``hf-hub/`` repository, resolved once per process."""
_LOCK = threading.Lock()
_CHUNK = 1 << 20


def model_files(source: ModelSource) -> list[Path]:
    """The local files whose bytes make the model's replies: weights (the GGUF file, or every
    ``*.safetensors``/``*.bin``), configuration, tokenizer and chat template.

    Args:
        source: A local source.
    """
    folder = Path(source.location)
    if source.gguf_file:
        beside = [n for n in GGUF_SIDE_FILES if (folder / n).is_file()]
        return [folder / n for n in [source.gguf_file, *beside]]
    suffixes = SIDE_SUFFIXES + WEIGHT_SUFFIXES
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(suffixes) and p.is_file())
    return [folder / n for n in names]


def _signature(path: Path) -> tuple[str, int, int, int, int, int]:
    """Identity of one file's bytes as far as stat tells: a new file (inode), a write (size,
    mtime) or one that set mtime back (ctime, which only the kernel sets)."""
    st = path.stat()
    return (str(path.absolute()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def files_signature(source: ModelSource) -> tuple[tuple[str, int, int, int, int, int], ...]:
    """Stat identity of a local model's files (empty for a hub model): cheap, for telling
    whether a loaded model still matches its files.

    Args:
        source: The model's source.

    Raises:
        OSError: A file cannot be read.
    """
    return tuple(_signature(p) for p in model_files(source)) if source.local else ()


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, read once per process while its stat stays the same.

    The whole file, not its header: two fine-tunes of one architecture have identical
    safetensors and GGUF headers (names, shapes, offsets) and differ only in the bytes.

    Args:
        path: The file.

    Raises:
        OSError: It cannot be read.
    """
    before = _signature(path)
    with _LOCK:
        known = _DIGESTS.get(before)
        if known is not None:
            return known
        digest = hashlib.sha256()
        with path.open("rb") as file:
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
        # Remembered only when the file did not change while it was read.
        if _signature(path) == before:
            _DIGESTS[before] = digest.hexdigest()
        return digest.hexdigest()


def model_fingerprint(source: ModelSource) -> str:
    """What the model's files hold, for the response cache's key.

    Local: a SHA-256 over each of :func:`model_files`' name and content hash. Hub: the
    repository's commit (a commit's files never change), the same one the model loads.

    Args:
        source: The model's source.

    Raises:
        OSError: A local file cannot be read.
        ModelConfigError: A hub repository's commit cannot be found (no network and not in
            the Hugging Face cache).
    """
    if not source.local:
        return f"{source.model}@{hub_revision(source)}"
    combined = hashlib.sha256()
    for path in model_files(source):
        combined.update(f"{path.name}\0{file_digest(path)}\n".encode())
    return combined.hexdigest()


def hub_revision(source: ModelSource) -> str:
    """The commit an ``hf-hub/`` model is loaded from: the hub's current one (once per
    process), or with ``HF_HUB_OFFLINE`` or no network the one in the Hugging Face cache.

    Args:
        source: A hub source.

    Raises:
        ModelConfigError: huggingface_hub is missing, or no commit can be found.
    """
    with _LOCK:
        known = _REVISIONS.get(source.location)
    if known is not None:
        return known
    try:
        from huggingface_hub import HfApi, constants, try_to_load_from_cache
    except ImportError as exc:
        raise ModelConfigError(f"model {source.model}: huggingface_hub is not installed") from exc
    revision: str | None = None
    reason = "HF_HUB_OFFLINE is set"
    if not constants.HF_HUB_OFFLINE:
        try:
            revision = HfApi().model_info(source.location).sha
        except Exception as exc:  # noqa: BLE001 - any failure falls back to the local cache
            reason = f"{type(exc).__name__}: {exc}"[:300]
    if not revision:
        cached = try_to_load_from_cache(source.location, source.gguf_file or "config.json")
        if isinstance(cached, str):  # .../snapshots/<commit>/<file>
            revision = Path(cached).parent.name
    if not revision:
        raise ModelConfigError(
            f"model {source.model}: cannot find the repository's commit ({reason}) and it is "
            "not in the Hugging Face cache"
        )
    with _LOCK:
        _REVISIONS[source.location] = revision
    return revision
