"""Constrained extraction on the 1.5B: 20 prompts of our own, each with a JSON schema (invoices,
addresses, API parameters, nested lists, enums). Plain constrained greedy decoding (`ar`), the
default method (`draft`, the 0.5B) under the same grammar, and the same method with the
grammar's forced spans left out of the drafts (`LLConstraint.forced` returning nothing): speed
ratios from one run, every output checked against its schema and against plain's tokens.

    .venv/bin/python docs/benchmarks/grammar/extraction.py > docs/benchmarks/grammar/extraction.txt
    .venv/bin/python docs/benchmarks/grammar/extraction.py lookup > .../extraction-lookup.txt
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
import time

import jsonschema

from specdecode.grammars import LLConstraint
from specdecode.pipeline import SpecDecoder

S, I, N, B = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}


def obj(**props) -> dict:
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


def enum(*values) -> dict:
    return {"type": "string", "enum": list(values)}


def array(items) -> dict:
    return {"type": "array", "items": items}


ADDRESS = obj(street=S, city=S, postal_code=S, country=S)
CASES = [
    (obj(invoice_number=S, total=N, currency=enum("EUR", "USD", "GBP"), paid=B),
     "Invoice INV-2026-0412 for 1,180.50 EUR was paid on 3 March."),
    (obj(name=S, address=ADDRESS),
     "Ship to Anna Schmidt, Hauptstrasse 12, 10115 Berlin, Germany."),
    (obj(endpoint=S, method=enum("GET", "POST", "PUT", "DELETE"), params=obj(user_id=I, limit=I)),
     "Call the users API: GET /v1/users/{id}/orders for user 4821, at most 25 results."),
    (obj(items=array(obj(product=S, quantity=I, unit_price=N))),
     "Order: 3 notebooks at 2.50 each, 1 stapler at 7.90, and 12 pencils at 0.40 each."),
    (obj(title=S, year=I, genres=array(enum("drama", "comedy", "sci-fi", "thriller"))),
     "The film Arrival (2016) is a science fiction drama."),
    (obj(city=S, temperature_c=N, condition=enum("sunny", "cloudy", "rain", "snow")),
     "Weather report: Oslo, 4.5 degrees Celsius, light snow."),
    (obj(first_name=S, last_name=S, email=S, phone=S),
     "Contact: Dr. Jamal Okafor, jamal.okafor@example.org, +44 20 7946 0958."),
    (obj(function=S, arguments=obj(path=S, recursive=B)),
     "Delete the directory /tmp/build and everything below it."),
    (obj(sender=S, recipients=array(S), subject=S, urgent=B),
     "Email from lee@corp.com to ops@corp.com and dev@corp.com: 'Database down', urgent."),
    (obj(company=S, employees=I, founded=I, headquarters=ADDRESS),
     "Acme Robotics, founded 1998, has 340 employees; HQ: 500 Market St, San Francisco 94105, USA."),
    (obj(sentiment=enum("positive", "negative", "neutral"), score=N, topics=array(S)),
     "Review: 'Battery life is superb and the screen is sharp, but the price is steep.'"),
    (obj(flight=S, origin=S, destination=S, departure=S, seats=array(S)),
     "Booking: flight LH 441 from Frankfurt to Boston departing 2026-05-14 10:25, seats 32A and 32B."),
    (obj(recipe=S, servings=I, ingredients=array(obj(name=S, amount=S))),
     "Pancakes for 4: 200 g flour, 2 eggs, 300 ml milk, a pinch of salt."),
    (obj(patient_id=S, age=I, symptoms=array(S), priority=enum("low", "medium", "high")),
     "Patient P-0093, 67 years old, chest pain and shortness of breath: treat at once."),
    (obj(repository=S, branch=S, files_changed=I, passed=B),
     "CI run on github.com/acme/widgets, branch fix-login: 7 files changed, all tests passed."),
    (obj(query=S, filters=obj(min_price=N, max_price=N, in_stock=B), sort=enum("price", "rating")),
     "Find wireless headphones between 50 and 150 dollars, in stock only, cheapest first."),
    (obj(event=S, date=S, location=S, attendees=I),
     "The annual PyCon Italia takes place on 2026-05-28 in Bologna with about 800 attendees."),
    (obj(account=S, transactions=array(obj(date=S, amount=N, type=enum("debit", "credit")))),
     "Account DE44 5001: 2026-01-03 debit 45.00, 2026-01-05 credit 1200.00, 2026-01-09 debit 9.99."),
    (obj(language=S, version=S, dependencies=array(obj(name=S, version=S))),
     "The service runs Python 3.11 with fastapi 0.110, uvicorn 0.30 and pydantic 2.7."),
    (obj(name=S, role=enum("admin", "editor", "viewer"), teams=array(S), active=B),
     "User Priya Natarajan is an editor in the teams 'search' and 'ranking'; her account is active."),
]
MAX_NEW = 128


def run(decoder: SpecDecoder, cases) -> list:
    out = []
    for schema, text in cases:
        prompt = f"Extract the information as JSON.\n\n{text}"
        grammar = decoder.grammars.json_schema(schema)
        out.append(decoder.generate(prompt, max_new_tokens=MAX_NEW, grammar=grammar))
    return out


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
               if line.startswith("model name"))
    plain = SpecDecoder.load("qwen2.5-coder-1.5b", "ar")
    spec = SpecDecoder(plain.model, sys.argv[1] if len(sys.argv) > 1 else None)  # default: the
    # model's default method
    print(f"# commit {commit}; {cpu}; {platform.machine()}; {plain.model.kernels}; "
          f"method {spec.describe()}")
    run(plain, CASES[:1]), run(spec, CASES[:1])  # warm-up: first forwards, grammar set-up
    forced = LLConstraint.forced
    rows = {}
    for name, decoder, free in (("ar", plain, True), (spec.method, spec, True),
                                (f"{spec.method}, no grammar drafts", spec, False)):
        LLConstraint.forced = forced if free else (lambda self: [])
        t0 = time.perf_counter()
        rows[name] = (run(decoder, CASES), time.perf_counter() - t0)
    LLConstraint.forced = forced
    ref = rows["ar"][0]
    for name, (results, seconds) in rows.items():
        tokens = sum(r.stats.new_tokens for r in results)
        valid = sum(1 for (schema, _), r in zip(CASES, results)
                    if r.finish_reason == "stop" and _valid(r.text, schema))
        same = sum(r.token_ids == p.token_ids for r, p in zip(results, ref))
        forwards = sum(r.stats.target_forwards for r in results)
        forced_n = sum(r.stats.forced for r in results)
        mask_ms = 1e3 * sum(r.stats.constraint_seconds for r in results) / tokens
        step_ms = 1e3 * statistics.median(r.stats.verify_seconds / r.stats.target_forwards
                                          for r in results)
        print(f"{name:28s} {seconds:6.1f} s  {tokens / seconds:6.1f} tok/s  "
              f"x{rows['ar'][1] / seconds:4.2f} ar  tau {tokens / forwards:4.2f}  "
              f"forced drafts {forced_n:4d} ({forced_n / tokens:4.0%} of tokens)  "
              f"grammar {mask_ms:5.2f} ms/token (median step {step_ms:5.1f} ms)  "
              f"valid {valid}/{len(CASES)}  same as ar {same}/{len(CASES)}")
    for (schema, text), r in zip(CASES, rows[spec.method][0]):
        print(f"  {r.finish_reason:6s} {r.text}")


def _valid(text: str, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


if __name__ == "__main__":
    main()
