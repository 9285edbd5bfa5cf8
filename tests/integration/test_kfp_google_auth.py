"""Google credentials and IAP for Kubeflow Pipelines, against a local OAuth token endpoint.

The service-account key is generated here; its ``token_uri`` points at a local fake of
Google's OAuth 2.0 token endpoint, which verifies each signed JWT assertion with the key's
public half and answers with the token the fake KFP server expects. For IAP, kfp.Client
asks Google's token endpoint for an OpenID Connect token through a module constant; the
test points that address at the fake too.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import jwt

from gkeflow.pipelines.settings.config import GkeflowConfig
from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.submit import submit
from tests.integration.conftest import FAST, TOKEN, config_dict
from tests.integration.fake_http import SERVE_FOREVER

IAP_CLIENT_ID = "1234-iap.apps.googleusercontent.com"
SA_EMAIL = "pipelines@my-project.iam.gserviceaccount.com"
#: The audience google-auth signs service-account assertions for, whatever the token_uri.
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"


class FakeGoogleTokenEndpoint:
    """``POST /token`` with a JWT-bearer grant, verified against the service account's key."""

    def __init__(self, public_pem: bytes):
        self.public_pem = public_pem
        self.grants: list[dict] = []
        self.rejections: list[str] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                status, payload = endpoint.answer(form)
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/token"

    def answer(self, form: dict) -> tuple[int, dict]:
        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
            self.rejections.append(f"grant_type {form.get('grant_type')}")
            return 400, {"error": "unsupported_grant_type"}
        try:
            claims = jwt.decode(form["assertion"][0], certs=self.public_pem,
                                audience=[GOOGLE_TOKEN_AUDIENCE, self.url])
        except (KeyError, ValueError) as exc:
            self.rejections.append(str(exc))
            return 400, {"error": "invalid_grant", "error_description": str(exc)}
        if claims.get("iss") != SA_EMAIL:
            self.rejections.append(f"issuer {claims.get('iss')}")
            return 400, {"error": "invalid_grant"}
        self.grants.append(claims)
        if "target_audience" in claims:  # an OpenID Connect token for IAP
            return 200, {"id_token": TOKEN}
        return 200, {"access_token": TOKEN, "expires_in": 3600, "token_type": "Bearer"}

    def __enter__(self):
        threading.Thread(target=self._server.serve_forever,
                         kwargs=SERVE_FOREVER, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def google_credentials(tmp_path, monkeypatch):
    """A service-account key file whose token endpoint is a local fake (ADC points at it)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    with FakeGoogleTokenEndpoint(public_pem) as endpoint:
        key_file = Path(tmp_path) / "service-account.json"
        key_file.write_text(json.dumps({
            "type": "service_account", "project_id": "my-project",
            "private_key_id": "k1", "private_key": private_pem, "client_email": SA_EMAIL,
            "client_id": "1", "token_uri": endpoint.url,
        }))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
        monkeypatch.setenv("HOME", str(tmp_path))  # no saved kfp credentials
        yield endpoint
        assert endpoint.rejections == []


def gke_config(kfp_url: str, auth: dict) -> GkeflowConfig:
    data = config_dict(kfp_url, None)
    data["targets"]["gke"]["auth"] = auth
    return GkeflowConfig.model_validate(data)


def test_google_application_default_credentials(kfp_server, google_credentials, tmp_path,
                                                capsys):
    config = gke_config(kfp_server.url, {"google": True})
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=KfpBackend(config.targets.gke, policy=FAST),
                           version="g1")
    assert submission.run_id
    (grant,) = google_credentials.grants
    assert "cloud-platform" in grant["scope"]
    assert kfp_server.calls("POST", r"/runs$"), "the run was created with the Google token"
    assert TOKEN not in capsys.readouterr().out


def test_iap_client_id_gets_an_openid_connect_token(kfp_server, google_credentials, tmp_path,
                                                    monkeypatch):
    from kfp.client import auth as kfp_auth

    monkeypatch.setattr(kfp_auth, "OAUTH_TOKEN_URI", google_credentials.url)
    config = gke_config(kfp_server.url, {"iap_client_id": IAP_CLIENT_ID})
    submission, _ = submit(config, "training", "gke", environment="default", overrides={},
                           workdir=tmp_path, backend=KfpBackend(config.targets.gke, policy=FAST),
                           version="g1")
    assert submission.run_id
    assert [g.get("target_audience") for g in google_credentials.grants][-1] == IAP_CLIENT_ID
    assert kfp_server.calls("POST", r"/runs$")
