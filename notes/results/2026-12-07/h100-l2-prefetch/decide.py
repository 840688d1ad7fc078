import json, sys
rounds = [json.load(open(p)) for p in sys.argv[1:]]
gain = {}
for rows in rounds:
    for r in rows:
        key = (tuple(r["shape"]), tuple(r["plan"]))
        if r["rule"][0] and all(r["ok"].values()):
            gain.setdefault(key, []).append(r["us"]["none"] - r["us"]["all"])
        elif not all(r["ok"].values()):
            print("WRONG", key); sys.exit(2)
means = {k: sum(v) / len(v) for k, v in gain.items()}
for k, v in means.items(): print(k, round(v, 3))
table = [v for k, v in means.items() if k[1] in (("f8", 128, 5), ("f8", 64, 4))]
ship = len(table) == 2 and min(table) > -0.1 and max(table) >= 0.25
print("SHIP" if ship else "NO")
sys.exit(0 if ship else 1)
