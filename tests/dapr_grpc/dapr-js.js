// The Dapr JavaScript SDK (@dapr/dapr, pinned in package.json) in gRPC mode
// against redlockd's --dapr-grpc-listen port, or in HTTP mode against its
// --listen port, as an application would use it. Run by test_dapr_grpc.py:
//   node dapr-js.js grpc|http PORT [TOKEN]
// Prints one JSON object per step on stdout; exits 0 when every step ran
// (the Python side judges the answers), 1 on an exception.
"use strict";

const { DaprClient, CommunicationProtocolEnum, LogLevel } = require("@dapr/dapr");

async function main() {
  const [mode, port, token] = process.argv.slice(2);
  const client = new DaprClient({
    daprHost: "127.0.0.1",
    daprPort: port,
    communicationProtocol: mode === "http" ? CommunicationProtocolEnum.HTTP : CommunicationProtocolEnum.GRPC,
    daprApiToken: token || undefined,
    logger: { level: LogLevel.Error },
  });
  const out = (step, value) => console.log(JSON.stringify({ step, value }));
  // start() waits for the sidecar with GetMetadata, as every call would.
  await client.start();
  const md = await client.metadata.get();
  out("metadata", { id: md.id, components: (md.components || []).map((c) => c.name) });
  const res = "js-order-" + mode + "-" + process.pid;
  out("lock_a", await client.lock.lock("lockstore", res, "js-owner-a", 30));
  out("lock_b", await client.lock.lock("lockstore", res, "js-owner-b", 30));
  out("unlock_b", await client.lock.unlock("lockstore", res, "js-owner-b"));
  out("unlock_a", await client.lock.unlock("lockstore", res, "js-owner-a"));
  out("unlock_a_again", await client.lock.unlock("lockstore", res, "js-owner-a"));
  out("lock_b_after", await client.lock.lock("lockstore", res, "js-owner-b", 30));
  out("unlock_b_after", await client.lock.unlock("lockstore", res, "js-owner-b"));
  // daprd's resource ids and owners: a path, an e-mail address, a space,
  // UTF-8, 180 bytes; owners with spaces, quotes and UTF-8.
  const ids = ["orders/42", "user@example.com", "a b", "caf\u00e9-\u6771\u4eac", "r".repeat(180)];
  const owners = [["worker 7", "worker 8"], ["ops@example.com", "dev@example.com"],
                  ['a "quoted" one', "a \\ backslash"], ["j\u00f6rg", "j\u00f6rn"], ["o", "o p"]];
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i] + (i === 4 ? "" : "-" + mode + "-" + process.pid);
    const [a, b] = owners[i];
    out(`id${i}_lock_a`, await client.lock.lock("lockstore", id, a, 30));
    out(`id${i}_lock_b`, await client.lock.lock("lockstore", id, b, 30));
    out(`id${i}_unlock_b`, await client.lock.unlock("lockstore", id, b));
    out(`id${i}_unlock_a`, await client.lock.unlock("lockstore", id, a));
    out(`id${i}_unlock_a_again`, await client.lock.unlock("lockstore", id, a));
  }
  try {
    await client.lock.lock("lockstore", "", "js-owner-a", 30);
    out("lock_empty", { error: null });
  } catch (e) {
    out("lock_empty", { error: String(e && e.message ? e.message : e) });
  }
  await client.stop();
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error("dapr-js:", e && e.stack ? e.stack : e);
    process.exit(1);
  },
);
