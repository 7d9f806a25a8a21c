from __future__ import annotations

import pytest

from pyspark_gazette import errors
from pyspark_gazette.protocol import pb


@pytest.mark.parametrize("status", [v.number for v in pb.Status.DESCRIPTOR.values if v.number != 0])
def test_every_status_has_its_own_class(status):
    err = errors.error_for_status(status, "boom", journal="a/b")
    assert type(err) is errors.STATUS_ERRORS[status]
    assert err.status == status
    assert pb.Status.Name(status) in str(err) and "'a/b'" in str(err) and "boom" in str(err)
    assert isinstance(err, errors.StatusError) and isinstance(err, errors.GazetteError)


def test_retriable_flags():
    retriable = {s for s, cls in errors.STATUS_ERRORS.items() if cls.retriable}
    assert retriable == {
        pb.NO_JOURNAL_PRIMARY_BROKER,
        pb.NOT_JOURNAL_PRIMARY_BROKER,
        pb.INSUFFICIENT_JOURNAL_BROKERS,
        pb.NOT_JOURNAL_BROKER,
        pb.OFFSET_NOT_YET_AVAILABLE,
        pb.WRONG_ROUTE,
        pb.FRAGMENT_STORE_UNHEALTHY,
    }
    assert errors.TransportError("x", "UNAVAILABLE").retriable
    assert not errors.TransportError("x", "INVALID_ARGUMENT").retriable
    assert not errors.CancelledError("x", "DEADLINE_EXCEEDED").retriable


def test_unknown_status_and_carried_fields():
    assert errors.error_for_status(99).unknown_status == 99
    resp = pb.AppendResponse(status=pb.REGISTER_MISMATCH, registers=pb.LabelSet(labels=[pb.Label(name="a", value="b")]))
    err = errors.error_for_status(resp.status, response=resp)
    assert isinstance(err, errors.RegisterMismatchError) and err.registers.labels[0].value == "b"
    resp = pb.AppendResponse(status=pb.FRAGMENT_STORE_UNHEALTHY, store_health_error="bucket gone")
    err = errors.error_for_status(resp.status, response=resp)
    assert err.store_health_error == "bucket gone" and "bucket gone" in str(err)


def test_fragment_errors_name_the_fragment_and_redact_signatures():
    url = "https://b.s3.amazonaws.com/j/0-1-ab.zst?X-Amz-Credential=AKIA123&X-Amz-Signature=deadbeef&X-Amz-Expires=60"
    err = errors.FragmentTooShortError("ended early", journal="a/b", begin=10, end=20, fragment=url)
    text = str(err)
    assert "'a/b'" in text and "[10, 20)" in text and "0-1-ab.zst" in text
    assert "deadbeef" not in text and "AKIA123" not in text


def test_redact_url_userinfo_and_sas():
    assert "secret" not in errors.redact_url("http://user:secret@host/x")
    assert "sig=REDACTED" in errors.redact_url("https://acct.blob.core.windows.net/c/k?sv=1&sig=abc%2F")
