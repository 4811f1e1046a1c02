#!/usr/bin/env node
// The compatibility-matrix adapter for kafkajs (issue 11 §3, driven by compat/run.py).
// Usage: adapter.js --bootstrap HOST:PORT[,...] --brokers N --prefix P --scenarios s1,s2,...
'use strict'

const fs = require('fs')
const { Kafka, CompressionTypes, CompressionCodecs, ConfigResourceTypes, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const LZ4Codec = require('kafkajs-lz4')
const h = require('../js-common/harness')
const scenarios = require('../js-common/scenarios')

// kafkajs ships gzip only; snappy and lz4 come from the codec packages its docs name.
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec

// kafkajs logs to stdout by default; the contract keeps stdout for results.
const toStderr = () => ({ namespace, label, log }) => {
  const { message, ...extra } = log
  console.error(`[kafkajs ${label}] ${namespace}: ${message} ${JSON.stringify(extra)}`)
}

function kafka(opts) {
  return new Kafka({
    clientId: 'compat-kafkajs',
    brokers: opts.brokers,
    logLevel: logLevel.WARN,
    logCreator: toStderr,
    ...security(opts.login),
  })
}

/**
 * kafkajs's `ssl` (Node's TLS options: the CA, and the client certificate for mutual TLS) and
 * `sasl` (its plain, scram-sha-256/512 and oauthbearer mechanisms) for a --security login.
 */
function security(login) {
  if (!login) return {}
  const config = {}
  if (login.ca) {
    config.ssl = { ca: [fs.readFileSync(login.ca)] }
    if (login.client_cert) {
      config.ssl.cert = fs.readFileSync(login.client_cert)
      config.ssl.key = fs.readFileSync(login.client_key)
    }
  }
  if (login.sasl_mechanism === 'OAUTHBEARER') {
    config.sasl = { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: login.token }) }
  } else if (login.sasl_mechanism) {
    config.sasl = { mechanism: login.sasl_mechanism.toLowerCase(), username: login.username, password: login.password }
  }
  return config
}

async function admin(opts) {
  const a = kafka(opts).admin()
  await a.connect()
  return a
}

async function produce(opts, topic, records, { acks = -1, compression, idempotent = false, partition = 0 }) {
  const producer = kafka(opts).producer({ idempotent })
  await producer.connect()
  try {
    await producer.send({ topic, acks, compression, messages: records.map(r => ({ ...r, partition })) })
  } finally {
    await producer.disconnect()
  }
}

/**
 * A running group member. kafkajs commits nothing by itself here (autoCommit off) so the
 * scenario commits exactly the offset it means. close() resolves when the member has left;
 * callers that do not need that leave it running in the background: kafkajs's disconnect
 * waits out the fetch in flight (maxWaitTimeInMs, 5 s by default, on a drained partition).
 */
async function consumer(opts, groupId, topics, { fromBeginning = true, readUncommitted, rack, onMessage }) {
  // kafkajs reads read_committed unless told readUncommitted; rackId is its client.rack.
  const c = kafka(opts).consumer({ groupId, ...(readUncommitted === undefined ? {} : { readUncommitted }), ...(rack ? { rackId: rack } : {}) })
  let crash
  let joined = false
  c.on(c.events.CRASH, e => (crash = e.payload.error))
  c.on(c.events.GROUP_JOIN, () => (joined = true))
  await c.connect()
  await c.subscribe({ topics, fromBeginning })
  await c.run({ autoCommit: false, eachMessage: async ({ message, partition }) => onMessage(message, partition) })
  const failIfCrashed = () => {
    if (crash) throw new Error(`consumer crashed: ${crash.message}`)
  }
  return {
    failIfCrashed,
    assigned: () => h.waitFor(`consumer in ${groupId} joins`, 20000, () => (failIfCrashed(), joined ? null : 'not joined')),
    commit: (topic, offset) => c.commitOffsets([{ topic, partition: 0, offset: String(offset) }]),
    close: () => c.disconnect().catch(e => console.error(`[kafkajs] disconnect failed: ${e.message}`)),
    native: c,
  }
}

/** A transactional producer (kafkajs requires idempotence and one request in flight for it). */
async function transactional(opts, transactionalId) {
  const producer = kafka(opts).producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  let tx
  return {
    begin: async () => (tx = await producer.transaction()),
    send: (topic, values) => tx.send({ topic, acks: -1, messages: values.map(v => ({ value: Buffer.from(v), partition: 0 })) }),
    sendOffsets: (_consumer, consumerGroupId, topic, offset) =>
      tx.sendOffsets({ consumerGroupId, topics: [{ topic, partitions: [{ partition: 0, offset: String(offset) }] }] }),
    commit: () => tx.commit(),
    abort: () => tx.abort(),
    close: () => producer.disconnect(),
  }
}

const topicResource = topic => ({ type: ConfigResourceTypes.TOPIC, name: topic })

h.main(
  'kafkajs',
  scenarios({
    admin,
    produce,
    consumer,
    transactional,
    async brokers(opts, a) {
      return (await a.describeCluster()).brokers.map(b => `${b.host}:${b.port}`)
    },
    // kafkajs has only the legacy AlterConfigs (API 33), no IncrementalAlterConfigs.
    setRetention: (a, topic) =>
      a.alterConfigs({
        validateOnly: false,
        resources: [{ ...topicResource(topic), configEntries: [{ name: 'retention.ms', value: '3600000' }] }],
      }),
    async retention(a, topic) {
      const { resources } = await a.describeConfigs({
        includeSynonyms: false,
        resources: [{ ...topicResource(topic), configNames: ['retention.ms'] }],
      })
      const entry = resources[0].configEntries.find(c => c.configName === 'retention.ms')
      return entry && entry.configValue
    },
    addPartitions: (opts, a, topic, count) => a.createPartitions({ topicPartitions: [{ topic, count }] }),
    stable: group => group.state === 'Stable',
    compression: {
      gzip: CompressionTypes.GZIP,
      snappy: CompressionTypes.Snappy,
      lz4: CompressionTypes.LZ4,
      zstd: new h.NotApplicable(
        'kafkajs has no zstd codec built in, and the one its docs name (@kafkajs/zstd 0.1.1) does not install here: its native dependency cppzst 2.0.6 fails to compile against Node 20 headers'
      ),
    },
    groupProtocolNotApplicable:
      'kafkajs 2.2.4 has only the classic group protocol (JoinGroup/SyncGroup): no group.protocol=consumer, no ConsumerGroupHeartbeat (KIP-848)',
    shareNotApplicable: 'kafkajs 2.2.4 has no share consumer (KIP-932)',
    regexNotApplicable:
      'kafkajs matches a RegExp subscription once, against the topics that exist when subscribe() is called (consumer/index.js); a topic created later is never picked up',
  })
)
