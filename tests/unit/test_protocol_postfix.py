"""Fragment path postfix templates (protocol/postfix.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from pyspark_gazette.protocol import postfix

T = datetime(2019, 11, 19, 22, 5, 9, tzinfo=timezone.utc)
VALUES = postfix.SpoolValues(journal="a/b", begin=16, end=32, first_append_time=T)


@pytest.mark.parametrize(
    "template, expected",
    [
        ("", ""),
        (
            'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}',
            "date=2019-11-19/hour=22",
        ),
        ('{{.Spool.FirstAppendTime.Format "20060102T150405"}}', "20191119T220509"),
        ('{{ .Spool.FirstAppendTime.Format "Jan 2 06 03PM" }}', "Nov 19 19 10PM"),
        ("b={{ .Spool.Begin }}/e={{ .Spool.End }}/{{ .Name }}", "b=16/e=32/a/b"),
        ("x/ {{- .Spool.Begin -}} /y", "x/16/y"),
    ],
)
def test_postfix_templates(template, expected):
    assert postfix.evaluate(template, VALUES) == expected


@pytest.mark.parametrize(
    "template", ["{{ .Spool.Registers }}", '{{ printf "%d" 1 }}', "a={{ .Name", "{{ if .Name }}x{{ end }}"]
)
def test_unsupported_templates_are_rejected(template):
    with pytest.raises(ValueError):
        postfix.check_template(template, "a/b")
