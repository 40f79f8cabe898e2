"""Vault encryption: AES-256-GCM with the record's identity as associated data.

A vault secret is stored as `v1:<key id>:<base64 nonce+ciphertext>`. The associated data
binds a ciphertext to its record (type, id, user), so a ciphertext copied onto another record
or another user does not decrypt. The key comes from `MEMOS_VAULT_KEY` (base64 of 32 bytes)
or from a key file created on first use with owner-only permissions (0600). Several keys can
be loaded at once (newest first) so that `rotate` can re-encrypt under a new key while old
ciphertexts still open. Errors never carry a secret or a key.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .exceptions import MemoryOSError

__all__ = ["ENV_KEY", "SENSITIVITY", "VaultAccessError", "VaultCipher", "VaultKeyError", "decode_key", "generate_key", "key_files_stamp", "key_id",
           "legacy_key_file", "load_keys", "load_or_create_key", "pending_key_file", "read_key_file", "retire_key", "retired_key_file", "write_key_file"]

ENV_KEY = "MEMOS_VAULT_KEY"
_PREFIX = "v1"


SENSITIVITY = {"low": 0, "medium": 1, "high": 2}
"""Vault sensitivity levels, in order: a caller with clearance C may reveal items up to C."""


class VaultAccessError(MemoryOSError):
    """The caller's clearance is below the vault item's sensitivity."""


class VaultKeyError(MemoryOSError):
    """The vault key is missing, malformed, or not the key the secrets were encrypted with."""


def generate_key() -> bytes:
    """A fresh random 256-bit key."""
    return AESGCM.generate_key(bit_length=256)


def decode_key(text: str, origin: str) -> bytes:
    """A vault key from its base64 text (`origin` names where it came from, for the error)."""
    try:
        key = base64.urlsafe_b64decode(text.strip().encode())
    except (ValueError, TypeError):
        raise VaultKeyError(f"the vault key in {origin} is not valid base64") from None
    if len(key) != 32:
        raise VaultKeyError(f"the vault key in {origin} must be 32 bytes (base64), got {len(key)}")
    return key


def legacy_key_file() -> Path:
    """The key file every store shared before keys were per store (still read, never rotated)."""
    return Path.home() / ".config" / "memos" / "vault.key"


def read_key_file(path: str | Path) -> bytes:
    """The key in a key file."""
    return decode_key(Path(path).read_text(), str(path))


def retired_key_file(key_file: str | Path) -> Path:
    """Keys rotations replaced in a key file (decrypt only): a secret another process sealed
    before it saw the rotation, or another store sharing the file, still opens."""
    path = Path(key_file)
    return path.with_name(path.name + ".retired")


def retire_key(key_file: str | Path, key: bytes) -> None:
    """Keep `key` loadable for decryption beside `key_file` (owner-only, appended)."""
    path = retired_key_file(key_file)
    if key in _retired(path):
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as out:
        out.write(base64.urlsafe_b64encode(key).decode() + "\n")
        out.flush()
        os.fsync(out.fileno())


def _retired(path: Path) -> list[bytes]:
    if not path.exists():
        return []
    return [decode_key(line, str(path)) for line in path.read_text().splitlines() if line.strip()]


def load_or_create_key(key_file: str | Path) -> bytes:
    """The vault key: `MEMOS_VAULT_KEY` if set, else `key_file` (created, mode 0600, if missing)."""
    if os.environ.get(ENV_KEY):
        return decode_key(os.environ[ENV_KEY], f"${ENV_KEY}")
    path = Path(key_file)
    if path.exists():
        return decode_key(path.read_text(), str(path))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = generate_key()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # owner-only from the first byte
    with os.fdopen(fd, "w") as out:
        out.write(base64.urlsafe_b64encode(key).decode() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return key


def pending_key_file(key_file: str | Path) -> Path:
    """Where a rotation keeps the new key until every secret is re-encrypted under it."""
    path = Path(key_file)
    return path.with_name(path.name + ".next")


def load_keys(key_file: str | Path) -> tuple[bytes, ...]:
    """The keys to open the vault with: a pending rotation's new key first, then the current one,
    then keys rotations retired from this file (decrypt only)."""
    current = load_or_create_key(key_file)
    pending = pending_key_file(key_file)
    keys = (decode_key(pending.read_text(), str(pending)), current) if pending.exists() else (current,)
    if os.environ.get(ENV_KEY):
        return keys
    return (*keys, *[k for k in _retired(retired_key_file(key_file)) if k not in keys])


def key_files_stamp(key_file: str | Path) -> tuple[tuple[int, int, int] | None, ...]:
    """What changes when a rotation touches `key_file`'s keys (the file, its pending rotation's
    `.next`, its `.retired`): each file's inode, size and modification time, None when absent."""
    stamp: list[tuple[int, int, int] | None] = []
    for path in (Path(key_file), pending_key_file(key_file), retired_key_file(key_file)):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            stamp.append(None)
        else:
            stamp.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(stamp)


def write_key_file(path: str | Path, key: bytes) -> None:
    """Write a key file atomically with owner-only permissions."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(base64.urlsafe_b64encode(key).decode() + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def key_id(key: bytes) -> str:
    """A short public fingerprint of a key (not reversible)."""
    return hashlib.sha256(b"memos-vault-key|" + key).hexdigest()[:12]


@dataclass(frozen=True)
class VaultCipher:
    """Encrypts with the first key; decrypts with whichever loaded key made the ciphertext."""

    keys: tuple[bytes, ...]

    @classmethod
    def from_key(cls, key: bytes, *older: bytes) -> VaultCipher:
        return cls((key, *older))

    @property
    def key_id(self) -> str:
        return key_id(self.keys[0])

    def encrypt(self, plaintext: str, aad: bytes) -> str:
        nonce = os.urandom(12)
        sealed = AESGCM(self.keys[0]).encrypt(nonce, plaintext.encode("utf-8"), aad)
        return f"{_PREFIX}:{self.key_id}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def is_current(self, token: str) -> bool:
        """Whether `token` was encrypted with the current (first) key."""
        return token.startswith(f"{_PREFIX}:{self.key_id}:")

    def can_decrypt(self, token: str) -> bool:
        """Whether a key that made `token` is loaded."""
        parts = token.split(":", 2)
        return len(parts) == 3 and any(key_id(k) == parts[1] for k in self.keys)

    def decrypt(self, token: str, aad: bytes) -> str:
        try:
            prefix, kid, body = token.split(":", 2)
            raw = base64.urlsafe_b64decode(body.encode())
        except (ValueError, TypeError):
            raise VaultKeyError("a vault value is not a memos ciphertext (corrupt or written without encryption)") from None
        if prefix != _PREFIX:
            raise VaultKeyError(f"unknown vault ciphertext version {prefix!r}")
        key = next((k for k in self.keys if key_id(k) == kid), None)
        if key is None:
            raise VaultKeyError(f"this vault item was encrypted with key {kid}, which is not loaded; "
                                f"set {ENV_KEY} or the key file to that key")
        try:
            return AESGCM(key).decrypt(raw[:12], raw[12:], aad).decode("utf-8")
        except InvalidTag:
            raise VaultKeyError("a vault item failed authentication: wrong key, or the ciphertext was moved or tampered with") from None
