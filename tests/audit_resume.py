"""The audit's switches (``tests/audit_conditions.py``) for RESUME_UNUSABLE
(mxformats/validate/resume.py): each turns one declared condition off, and names the matrix
cases that must go red."""

from __future__ import annotations

from audit_switch import Switch, one

RESUME = "mxformats/validate/resume.py"
_READ = "        data = read_json(path, RESUME_MAX_BYTES)\n"
_RESULT = "            result = result_from_json(rec.get(\"result\"), task.index)\n"
_CHECK = "RESUME_UNUSABLE"

SWITCHES: tuple[Switch, ...] = (
    one("cond_resume_not_json_off", "value", "a resume file that is not JSON passed over",
        RESUME, _READ, "        try:\n    " + _READ + "        except ValueError:\n"
        "            return {}, None\n", _CHECK, "not JSON", "quark-mxfp4", "bf16"),
    one("cond_resume_no_records_off", "field", "a JSON document without task records passed "
        "over", RESUME,
        '            raise ValueError("not a JSON report of mxformats validate with task records")',
        "            return {}, None", _CHECK, "no task records", "modelopt-nvfp4"),
    one("cond_resume_malformed_off", "field", "a task record whose result is no object passed "
        "over", RESUME, _RESULT, "            if not isinstance(rec.get(\"result\"), dict):\n"
        "                continue\n" + _RESULT, _CHECK, "a malformed task record",
        "compressed-tensors-int4"),
    one("cond_resume_other_modules_off", "value", "a task record of other modules passed over",
        RESUME, "                raise ValueError(f\"task {task.index}'s record is not of its "
        "modules\")", "                continue", _CHECK, "a record of other modules",
        "quark-w4a8"),
    one("cond_resume_not_this_run_off", "value", "a report of another run passed over", RESUME,
        "    if records and not found:", "    if records and not found and False:", _CHECK,
        "no record of this run", "fp8-block"),
)
