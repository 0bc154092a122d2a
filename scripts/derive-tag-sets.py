#!/usr/bin/env python3
"""Tagged and flattened copies of the stabletoolbench evaluation set, to measure how tags weigh.

stabletoolbench is grouped by server, and each server's description ends with its RapidAPI
category ("suivi-colis (Logistics API)"). This writes, into OUT_DIR:

- `stb_tagged.catalog.json`: the grouped set, each tool tagged with its server's category;
- `stb_flat.catalog.json`: one flat list, tools named `SERVER_TOOL`, their own descriptions and
  schemas, no server descriptions; `stb_flat.queries.jsonl`: the queries with gold names to match;
- `stb_flat_tagged.catalog.json`: the flat list, each tool tagged with its category;
- `stb_flat_srvtag.catalog.json`: the flat list, each tool tagged with its server's name;
- `stb_bycat.catalog.json`: regrouped into one server per category (46 servers of 1 to 340
  tools, large as real MCP servers can be), tools named `SERVER_TOOL`, the server described by
  its category;
  `stb_bycat.queries.jsonl`: the queries with gold names to match.

`stb_tagged` takes the original queries (`stabletoolbench.queries.jsonl`).

    python3 scripts/derive-tag-sets.py [--eval-dir ../shared/eval] OUT_DIR
    toolshelf eval --catalog OUT_DIR/stb_flat_srvtag.catalog.json --queries OUT_DIR/stb_flat.queries.jsonl
"""

import argparse
import json
import os
import re


def category(server: dict) -> str | None:
    m = re.search(r"\(([^()]*) API\)\s*$", server.get("description", ""))
    return m.group(1).replace("_", " ") if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--eval-dir", default=os.path.join(here, "..", "..", "shared", "eval"))
    ap.add_argument("out_dir")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    src = os.path.join(args.eval_dir, "stabletoolbench")
    with open(src + ".catalog.json", encoding="utf-8") as f:
        grouped = json.load(f)

    def write(name: str, value) -> None:
        with open(os.path.join(args.out_dir, name), "w", encoding="utf-8") as f:
            json.dump(value, f, ensure_ascii=False)

    tagged = json.loads(json.dumps(grouped))
    for server in tagged["servers"]:
        cat = category(server)
        for tool in server["tools"]:
            if cat:
                tool["tags"] = [cat]
    write("stb_tagged.catalog.json", tagged)

    flat, by_category, by_server = [], [], []
    for server in grouped["servers"]:
        cat = category(server)
        for tool in server["tools"]:
            plain = {
                "name": server["name"] + "_" + tool["name"],
                "description": tool.get("description", ""),
                "parameters": tool.get("inputSchema", {"type": "object"}),
            }
            flat.append(plain)
            by_category.append(dict(plain, tags=[cat]) if cat else dict(plain))
            by_server.append(dict(plain, tags=[server["name"]]))
    write("stb_flat.catalog.json", flat)
    write("stb_flat_tagged.catalog.json", by_category)
    write("stb_flat_srvtag.catalog.json", by_server)

    categories: dict[str, list] = {}
    server_group: dict[str, str] = {}
    for server in grouped["servers"]:
        cat = category(server) or "Other"
        slug = re.sub(r"[^a-z0-9]+", "_", cat.lower()).strip("_")
        server_group[server["name"]] = slug
        group = categories.setdefault(slug, [cat, []])
        for tool in server["tools"]:
            group[1].append(dict(tool, name=server["name"] + "_" + tool["name"]))
    bycat = {
        "servers": [
            {"name": slug, "description": cat + " APIs", "tools": tools}
            for slug, (cat, tools) in sorted(categories.items())
        ]
    }
    write("stb_bycat.catalog.json", bycat)

    with open(src + ".queries.jsonl", encoding="utf-8") as f, open(
        os.path.join(args.out_dir, "stb_flat.queries.jsonl"), "w", encoding="utf-8"
    ) as out, open(os.path.join(args.out_dir, "stb_bycat.queries.jsonl"), "w", encoding="utf-8") as by:
        for line in f:
            q = json.loads(line)
            gold, regrouped = [], []
            for g in q["gold"]:
                server, tool = re.match(r"^mcp__(.*?)__(.*)$", g).groups()
                gold.append(f"{server}_{tool}")
                regrouped.append(f"mcp__{server_group[server]}__{server}_{tool}")
            out.write(json.dumps({"query": q["query"], "gold": gold}, ensure_ascii=False) + "\n")
            by.write(
                json.dumps({"query": q["query"], "gold": regrouped}, ensure_ascii=False) + "\n"
            )


if __name__ == "__main__":
    main()
