"""Load a generated sample kitchen (etl.sample.generate.build_sample output) straight into a warehouse,
without crawling: recipes expected ok, their clean step text, and their ok image files (absolute paths).
Used to measure the default encoder on a realistic corpus (`python tests/features/sample_loader.py`)."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from etl.load import load_recipe
from etl.records import RecipeRecord, StepRecord, image_id


def load_sample(con, sample_dir: Path) -> dict:
    site = Path(sample_dir) / "site"
    n_rec = n_img = 0
    for line in (Path(sample_dir) / "ground_truth.jsonl").read_text().splitlines():
        gt = json.loads(line)
        if gt["expected"]["stage"] is not None:
            continue
        steps = [StepRecord(s["step_idx"], s["title_clean"], s["body_clean"],
                            images=[im["url_path"] for im in s["images"]]) for s in gt["steps"]]
        rec = RecipeRecord(gt["recipe_id"], gt["url_path"], gt["title"], category=gt["category"],
                           channel=gt["channel"], steps=steps)
        load_recipe(con, rec, source="sample")
        n_rec += 1
        rows = []
        for s in gt["steps"]:
            for k, im in enumerate(s["images"]):
                f = site / im["url_path"].lstrip("/")
                if im["expected"] == "ok" and f.is_file():
                    rows.append([str(f), hashlib.sha256(f.read_bytes()).hexdigest(),
                                 image_id(gt["recipe_id"], s["step_idx"], k)])
        con.executemany("UPDATE images SET status = 'ok', path = ?, sha256 = ? WHERE image_id = ?", rows)
        n_img += len(rows)
    return {"recipes": n_rec, "images_ok": n_img}


if __name__ == "__main__":
    import time

    from etl.config import Paths
    from etl.warehouse import connect
    t = time.time()
    print(load_sample(connect(Paths.from_env().ensure()), Path(sys.argv[1])), f"{time.time() - t:.0f} s")
