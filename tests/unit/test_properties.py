"""Java properties files, as ``--command-config`` takes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.cli.common import merged_settings
from strom.errors import ConfigError
from strom.properties import parse_properties, read_properties


def test_the_forms_java_reads() -> None:
    text = "\n".join(
        [
            "# a comment",
            "   ! another comment",
            "",
            "security.protocol=SASL_SSL",
            "sasl.mechanism : SCRAM-SHA-512",
            "sasl.username   wordcount",
            "   ssl.ca.location=/etc/kafka/ca.pem   ",
            r"sasl.password=p\=ss\:w\\rd\ ",
            "empty=",
            "bare",
            r"key\ with\ spaces=v",
            "multi.line=first, \\",
            "    second, \\",
            "    third",
            r"unicode=caf\u00e9 \uD83D\uDE00",
            r"tabbed=a\tb",
            "security.protocol=SASL_PLAINTEXT",
        ]
    )
    assert parse_properties(text) == {
        "security.protocol": "SASL_PLAINTEXT",  # a later duplicate wins, as in Java
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "wordcount",
        "ssl.ca.location": "/etc/kafka/ca.pem   ",  # trailing whitespace is kept, as in Java
        "sasl.password": "p=ss:w\\rd ",
        "empty": "",
        "bare": "",
        "key with spaces": "v",
        "multi.line": "first, second, third",
        "unicode": "café \U0001f600",
        "tabbed": "a\tb",
    }


def test_an_even_number_of_backslashes_ends_the_line() -> None:
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}


def test_bad_files_are_config_errors_naming_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"line 2: malformed \\uXXXX"):
        parse_properties("ok=1\nbad=\\u12", source="x.properties")
    with pytest.raises(ConfigError, match=r"cannot read properties file .*missing\.properties"):
        read_properties(tmp_path / "missing.properties")
    latin1 = tmp_path / "latin1.properties"
    latin1.write_bytes(b"password=caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin1\.properties"):
        read_properties(latin1)


def test_config_options_win_over_the_command_config_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.username=app\n")
    assert merged_settings(path, {"sasl.username": "other", "client.id": "x"}) == {
        "security.protocol": "SASL_SSL",
        "sasl.username": "other",
        "client.id": "x",
    }
    assert merged_settings(None, {"a": "1"}) == {"a": "1"}
