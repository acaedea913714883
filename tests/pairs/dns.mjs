// A tiny authoritative DNS server on 127.0.0.1 (UDP) for the host-loss test: it answers A queries
// for the names it is given, as a cluster's DNS answers a StatefulSet pod's stable name — with the
// pod's current address, and NXDOMAIN while the pod does not exist. HAProxy's `resolvers` section
// (contrib/deploy/haproxy-dns.sh) asks it every second.

import dgram from "node:dgram";

/** Starts the server on `port`; `set(name, ip)` changes a record (`null`: the name is gone). */
export async function startDns(port) {
  const records = new Map();
  const socket = dgram.createSocket("udp4");
  socket.on("message", (q, from) => {
    const reply = answer(q, records);
    if (reply) socket.send(reply, from.port, from.address);
  });
  await new Promise((resolve, reject) => {
    socket.once("error", reject);
    socket.bind(port, "127.0.0.1", resolve);
  });
  return {
    set: (name, ip) => (ip ? records.set(name.toLowerCase(), ip) : records.delete(name.toLowerCase())),
    close: () => socket.close(),
  };
}

/** The reply to query `q`: its one question, then one A record (TTL 1 s), none (another type of a
 * known name), or NXDOMAIN. Anything unreadable gets no reply. */
function answer(q, records) {
  if (q.length < 12 || q.readUInt16BE(4) !== 1) return null;
  let at = 12;
  const labels = [];
  while (at < q.length && q[at] !== 0) {
    const len = q[at];
    if (len > 63 || at + 1 + len > q.length) return null;
    labels.push(q.subarray(at + 1, at + 1 + len).toString("ascii"));
    at += 1 + len;
  }
  const end = at + 5; // the root label, QTYPE, QCLASS
  if (end > q.length) return null;
  const qtype = q.readUInt16BE(at + 1);
  const ip = records.get(labels.join(".").toLowerCase());
  const known = records.has(labels.join(".").toLowerCase());
  const header = Buffer.alloc(12);
  header.writeUInt16BE(q.readUInt16BE(0), 0); // the query's id
  // QR, AA, the query's RD; RCODE 3 (NXDOMAIN) for an unknown name.
  header.writeUInt16BE(0x8400 | (q.readUInt16BE(2) & 0x0100) | (known ? 0 : 3), 2);
  header.writeUInt16BE(1, 4);
  const withA = known && qtype === 1;
  header.writeUInt16BE(withA ? 1 : 0, 6);
  const question = q.subarray(12, end);
  if (!withA) return Buffer.concat([header, question]);
  const rr = Buffer.alloc(16);
  rr.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
  rr.writeUInt16BE(1, 2); // A
  rr.writeUInt16BE(1, 4); // IN
  rr.writeUInt32BE(1, 6); // TTL
  rr.writeUInt16BE(4, 10);
  ip.split(".").forEach((b, i) => rr.writeUInt8(Number(b), 12 + i));
  return Buffer.concat([header, question, rr]);
}
