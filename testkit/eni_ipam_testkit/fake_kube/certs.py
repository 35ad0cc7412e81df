"""The fake API server's TLS material: a certificate authority and a server certificate for 127.0.0.1.

Clients verify the server as they verify a real cluster's: the kubeconfig carries the CA in
``certificate-authority-data`` and the server certificate names ``127.0.0.1``, ``::1`` and ``localhost``
as subject alternative names, so client-go (kubectl, helm), lightkube/httpx, aiohttp and Python's
``ssl`` module accept it without ``insecure-skip-tls-verify``.

Invariant: the key pair and certificates are made once per process, on first use, and shared by every
server (generating keys per server would dominate a suite that starts hundreds of them). ECDSA P-256
keys are used: generated in about a millisecond, and accepted by every client above. The PEM files
that :mod:`ssl` needs live in a private temporary directory that is removed when the process exits.
Validity is read from the wall clock (clients check it against theirs) and spans a day back and ten
years ahead, so clock skew between a test and a subprocess cannot matter.
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import datetime
import functools
import ipaddress
import shutil
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography import x509


@dataclasses.dataclass(frozen=True)
class TlsMaterial:
    """PEM-encoded CA certificate, and the server's certificate and key as files for :mod:`ssl`."""

    ca_pem: bytes
    cert_file: Path
    key_file: Path

    @property
    def ca_data(self) -> str:
        """The CA as a kubeconfig's ``certificate-authority-data`` (base64 of the PEM)."""
        return base64.b64encode(self.ca_pem).decode()

    def server_context(self) -> ssl.SSLContext:
        """A server-side context presenting the certificate; HTTP/1.1 only, as the server speaks it."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        context.set_alpn_protocols(["http/1.1"])
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client-side context trusting only this CA (for aiohttp, httpx and the like)."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def _name(common_name: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@functools.cache
def tls_material() -> TlsMaterial:
    """The process's TLS material, made on first call (cryptography is imported then, not before)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(days=1), now + datetime.timedelta(days=3650)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("fake-kube-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    alt_names = x509.SubjectAlternativeName(
        [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ]
    )
    server = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(alt_names, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory = Path(tempfile.mkdtemp(prefix="fake-kube-tls-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    cert_file, key_file = directory / "server.crt", directory / "server.key"
    cert_file.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return TlsMaterial(ca.public_bytes(serialization.Encoding.PEM), cert_file, key_file)


@functools.cache
def server_context() -> ssl.SSLContext:
    """One server-side context for every server of the process (contexts are safe to share)."""
    return tls_material().server_context()
