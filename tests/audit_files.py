"""The audit's switches (``tests/audit_conditions.py``) for the checks of the shard files'
kinds, links, headers and tensor spans: each turns one declared condition off, and names the
matrix cases that must go red. A header rule of mxformats/tensorfile.py is switched off by
reporting its error as another kind (a span error as a header one, a header error as a span
one): the check the condition belongs to no longer fires, which is the bug class the matrix
must catch (every rule still refuses the file, under another check)."""

from __future__ import annotations

from audit_switch import CTI, CTN, LOADER, MON, MX, W4, Switch, one

TENSORFILE = "mxformats/tensorfile.py"
FILES = "mxformats/validate/files.py"
INTERFACE = "mxformats/validate/readers/interface.py"
_AS_SPAN = ", ErrorKind.SPAN)"
_NOT_REGULAR = ('        FILE_NOT_REGULAR, f"{name} is {exc.what}, not a regular file; not opened", '
                'file=name')
_TILING = "                path, problem, kind=ErrorKind.SPAN, tensor=name,"


def _header(name: str, old: str, condition: str, fmt: str, new: str | None = None) -> Switch:
    """A header rule's error ``raise fail(...)`` reported as a span error."""
    return one(name, "value", f"{condition}: reported as TENSOR_SPAN", TENSORFILE, old,
               new if new is not None else old[:-1] + _AS_SPAN, "HEADER_INVALID", condition, fmt)


def _not_regular(name: str, guard: str, condition: str, fmt: str) -> Switch:
    return one(name, "role", f"{condition}: reported as HEADER_INVALID", LOADER, _NOT_REGULAR,
               _NOT_REGULAR.replace("FILE_NOT_REGULAR,",
                                    f"FILE_NOT_REGULAR if not ({guard}) else HEADER_INVALID,"),
               "FILE_NOT_REGULAR", condition, fmt)


SWITCHES: tuple[Switch, ...] = (
    one("cond_header_short_file_off", "value", "a file under 8 bytes reported as a span error",
        TENSORFILE, '        raise fail(f"file is {len(prefix)} bytes, shorter than the 8-byte '
        'header length")', '        raise TensorFileError(path, "short", kind=ErrorKind.SPAN)',
        "HEADER_LENGTH", "a file shorter than 8 bytes", MX),
    one("cond_header_length_limit_off", "value", "a header length above the limit read as 0",
        TENSORFILE, '        raise fail(f"header length {n} exceeds the limit {MAX_HEADER_SIZE}")',
        "        n = 0", "HEADER_LENGTH", "a length above the limit", W4),
    one("cond_header_length_past_end_off", "value", "a header length past the file's end "
        "reported as a span error", TENSORFILE,
        '        raise fail(f"header length {n} runs past the end of the file ({file_size} '
        'bytes)")', '        raise TensorFileError(path, "past", kind=ErrorKind.SPAN)',
        "HEADER_LENGTH", "a length past the end of the file", CTN),
    _header("cond_header_utf8_off",
            '        raise fail(f"header is not UTF-8 ({exc.reason})", 8 + exc.start) from None',
            "not UTF-8", CTI,
            '        raise TensorFileError(path, "utf-8", kind=ErrorKind.SPAN) from None'),
    _header("cond_header_json_off",
            '        raise fail(f"header is not valid JSON ({exc.msg})", offset) from None',
            "not JSON", MON,
            '        raise TensorFileError(path, "json", kind=ErrorKind.SPAN) from None'),
    _header("cond_header_nesting_off",
            "    except (RecursionError, ValueError) as exc:  # nested past the recursion limit;",
            "nested too deeply", "fp8-block",
            "    except ValueError as exc:  # nested past the recursion limit;"),
    _header("cond_header_huge_integer_off",
            "    except (RecursionError, ValueError) as exc:  # nested past the recursion limit;",
            "an integer too long to read", "bf16",
            "    except RecursionError as exc:  # nested past the recursion limit;"),
    _header("cond_header_not_object_off",
            '        raise fail(f"header must be a JSON object, got {type(parsed).__name__}")',
            "not an object", "modelopt-mixed",
            '        raise TensorFileError(path, "object", kind=ErrorKind.SPAN)'),
    _header("cond_header_repeated_key_off",
            '                        path, "duplicate key in the header", kind=ErrorKind.HEADER, '
            'tensor=key,', "a repeated key", "compressed-tensors-fp8-block",
            '                        path, "duplicate key in the header", kind=ErrorKind.SPAN, '
            'tensor=key,'),
    _header("cond_header_metadata_off",
            '                path, "__metadata__ must be an object of strings", '
            'kind=ErrorKind.HEADER,', "__metadata__ not an object of strings", MX,
            '                path, "__metadata__ must be an object of strings", '
            'kind=ErrorKind.SPAN,'),
    _header("cond_header_entry_object_off",
            '        raise fail(f"the entry must be a JSON object, got {type(entry).__name__}")',
            "an entry not an object", W4),
    _header("cond_header_entry_key_off",
            "        raise fail(f\"the entry lacks {', '.join(missing)}\")",
            "an entry lacking dtype", "compressed-tensors-mixed"),
    _header("cond_header_dtype_off",
            "        raise fail(f\"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BITS)}\")",
            "an unknown dtype", "modelopt-fp8-block"),
    _header("cond_header_shape_off",
            '        raise fail(f"shape must be a list of integers >= 0, got {shape!r}")',
            "a negative dimension", CTN),
    _header("cond_header_offsets_form_off",
            '        raise fail(f"data_offsets must be two integers, got {offsets!r}")',
            "data_offsets not two integers", MON),
    _header("cond_header_whole_bytes_off",
            '        raise fail(f"{dtype} {shape} is not a whole number of bytes")',
            "a shape of no whole number of bytes", CTI),
    Switch("cond_span_outside_off", "value", "offsets outside the data section reported as a "
           "header error", TENSORFILE,
           'outside the data section [0, {data_size}]", ErrorKind.SPAN',
           'outside the data section [0, {data_size}]", ErrorKind.HEADER',
           (("TENSOR_SPAN", "offsets past the data section"), ("TENSOR_SPAN", "the file truncated")),
           (("TENSOR_SPAN", "offsets past the data section", MX),
            ("TENSOR_SPAN", "the file truncated", "fp8-block"))),
    one("cond_span_size_off", "value", "a span not shape x dtype reported as a header error",
        TENSORFILE, "needs {size}\",\n            ErrorKind.SPAN,",
        "needs {size}\",\n            ErrorKind.HEADER,", "TENSOR_SPAN", "a span not shape x dtype",
        W4),
    one("cond_span_overlap_off", "value", "overlapping tensors reported as a header error",
        TENSORFILE, _TILING, _TILING.replace(
            "kind=ErrorKind.SPAN", "kind=ErrorKind.HEADER if begin < position else ErrorKind.SPAN"),
        "TENSOR_SPAN", "overlapping tensors", CTI),
    one("cond_span_hole_off", "value", "a hole between tensors reported as a header error",
        TENSORFILE, _TILING, _TILING.replace(
            "kind=ErrorKind.SPAN", "kind=ErrorKind.HEADER if begin > position else ErrorKind.SPAN"),
        "TENSOR_SPAN", "a hole between tensors", "bf16"),
    one("cond_span_trailing_off", "value", "bytes after the last tensor reported as a header "
        "error", TENSORFILE, "        kind=ErrorKind.SPAN,\n        tensor=previous,",
        "        kind=ErrorKind.HEADER,\n        tensor=previous,", "TENSOR_SPAN",
        "bytes after the last tensor", "modelopt-mixed"),
    _not_regular("cond_not_regular_config_off", 'name == "config.json"', "config.json a FIFO", MX),
    _not_regular("cond_not_regular_index_off", "name == INDEX_NAME", "the index a FIFO", W4),
    _not_regular("cond_not_regular_shard_fifo_off", 'exc.what == "a FIFO" and name.endswith('
                 '".safetensors")', "a shard a FIFO", "compressed-tensors-mixed"),
    _not_regular("cond_not_regular_socket_off", 'exc.what == "a socket"', "a shard a socket",
                 CTN),
    _not_regular("cond_not_regular_directory_off", 'exc.what == "a directory"',
                 "a shard a directory", "modelopt-fp8-block"),
    one("cond_symlink_shard_off", "role", "a shard linked outside the folder opened", LOADER,
        '        if problem == "SYMLINK_ESCAPE":', '        if problem == "SYMLINK_ESCAPE" and False:',
        "SYMLINK_ESCAPE", "a shard linked outside", MX),
    one("cond_symlink_config_off", "role", "config.json linked outside the folder read", LOADER,
        '        out.append(Finding(SYMLINK_ESCAPE, f"{name} resolves outside the checkpoint; '
        'not read",\n                           file=name))\n        return None',
        "        pass", "SYMLINK_ESCAPE", "config.json linked outside", "fp8-block"),
    one("cond_symlink_index_off", "role", "the index linked outside the folder read", LOADER,
        '        out.append(Finding(SYMLINK_ESCAPE, f"{INDEX_NAME} resolves outside the '
        'checkpoint",\n                           file=INDEX_NAME))\n        return False',
        "        pass", "SYMLINK_ESCAPE", "the index linked outside", W4),
    one("cond_index_dot_slash_off", "value", "an index entry ./NAME accepted", FILES,
        "        if plain != entry:", "        if plain != entry and False:",
        "INDEX_PATH_NOT_PLAIN", "an entry ./NAME", CTI),
    one("cond_index_absolute_off", "value", "an absolute index entry taken for a name inside",
        INTERFACE, "pure.is_absolute() or os.path.isabs(name) or ", "", "INDEX_UNSAFE_PATH",
        "an absolute path", W4),
    one("cond_index_dotdot_off", "value", "an index entry through '..' taken for a name inside",
        INTERFACE, '".." in pure.parts \\\n        or ', "", "INDEX_UNSAFE_PATH",
        "a path through '..'", "bf16"),
)
