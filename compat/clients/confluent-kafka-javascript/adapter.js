#!/usr/bin/env node
// The compatibility-matrix adapter for @confluentinc/kafka-javascript (issue 11 §3, driven by
// compat/run.py), through its KafkaJS-compatible layer, plus its classic (node-rdkafka) API for
// the two calls that layer lacks: broker metadata and create partitions.
// Usage: adapter.js --bootstrap HOST:PORT[,...] --brokers N --prefix P --scenarios s1,s2,...
'use strict'

const rdkafka = require('@confluentinc/kafka-javascript')
const { Kafka, CompressionTypes, ConsumerGroupStates, ConsumerGroupTypes, logLevel } = rdkafka.KafkaJS
const h = require('../js-common/harness')
const scenarios = require('../js-common/scenarios')

const NAME = 'confluent-kafka-javascript'

/**
 * Logs to stderr (the default logger writes to stdout, which the contract keeps for results)
 * and remembers errors, which this client reports through its logger rather than by throwing.
 */
function stderrLogger(errors) {
  const line = (level, message, extra) => console.error(`[${NAME} ${level}] ${message} ${extra ? JSON.stringify(extra) : ''}`)
  const logger = {
    info: (m, e) => line('info', m, e),
    warn: (m, e) => line('warn', m, e),
    debug: () => {},
    error: (m, e) => {
      errors.push(m)
      line('error', m, e)
    },
    namespace: () => logger,
    setLogLevel: () => {},
  }
  return logger
}

function kafka(opts, errors = []) {
  const { kafkaJS, rdkafkaProperties, tokenSet } = security(opts.login)
  const k = new Kafka({
    kafkaJS: { brokers: opts.brokers, clientId: 'compat-ckjs', logLevel: logLevel.WARN, logger: stderrLogger(errors), ...kafkaJS },
    ...rdkafkaProperties,
  })
  k.tokenSet = tokenSet
  return k
}

/**
 * A --security login in this client's words: the KafkaJS layer's `ssl: true` and `sasl` (plain,
 * scram-sha-256/512, or oauthbearer with a provider giving the signed token, its principal and
 * lifetime) inside the kafkaJS block; the CA and client certificate as librdkafka properties
 * beside it, as the layer requires.
 */
function security(login) {
  if (!login) return { kafkaJS: {}, rdkafkaProperties: {} }
  const kafkaJS = {}
  const rdkafkaProperties = {}
  if (login.ca) {
    kafkaJS.ssl = true
    rdkafkaProperties['ssl.ca.location'] = login.ca
  }
  if (login.client_cert) {
    rdkafkaProperties['ssl.certificate.location'] = login.client_cert
    rdkafkaProperties['ssl.key.location'] = login.client_key
  }
  let tokenSet = null
  if (login.sasl_mechanism === 'OAUTHBEARER') {
    let given
    tokenSet = new Promise(resolve => (given = resolve))
    kafkaJS.sasl = {
      mechanism: 'oauthbearer',
      oauthBearerProvider: async () => {
        // The layer sets the token when this promise resolves: a turn of the event loop later.
        setImmediate(given)
        return { value: login.token, principal: login.token_principal, lifetime: login.token_expires_ms }
      },
    }
  } else if (login.sasl_mechanism) {
    kafkaJS.sasl = { mechanism: login.sasl_mechanism.toLowerCase(), username: login.username, password: login.password }
  }
  return { kafkaJS, rdkafkaProperties, tokenSet }
}

/**
 * A connected admin client. With OAUTHBEARER it is handed over once the token callback has run:
 * this layer's admin calls (createTopics) block Node's event loop until they answer or time out
 * (seen: no timer fires meanwhile), so a call made right after connect() would wait out its
 * timeout before the token the provider already returned could be set.
 */
async function admin(opts, errors = []) {
  const k = kafka(opts, errors)
  const a = k.admin()
  await a.connect()
  if (k.tokenSet) await k.tokenSet
  return a
}

async function produce(opts, topic, records, { acks = -1, compression, idempotent = false, partition = 0 }) {
  const kafkaJS = { acks, idempotent }
  if (compression) kafkaJS.compression = compression
  const producer = kafka(opts).producer({ kafkaJS })
  await producer.connect()
  try {
    await producer.send({ topic, messages: records.map(r => ({ ...r, partition })) })
  } finally {
    await producer.disconnect()
  }
}

/**
 * A running group member; nothing is auto-committed, so the scenario commits what it means.
 * While a regex subscription matches nothing, librdkafka reports "Unknown topic or partition"
 * itself (the same against Kafka); that notice is not counted as an error.
 */
async function consumer(opts, groupId, topics, { fromBeginning = true, metadataRefreshMs, readUncommitted, groupProtocol, rack, onMessage }) {
  const logged = []
  const isRegex = topics.some(t => t instanceof RegExp)
  const errors = {
    push: m => (isRegex && /Unknown topic or partition/.test(m) ? console.error(`[${NAME}] (regex notice, not an error)`) : logged.push(m)),
  }
  const kafkaJS = { groupId, fromBeginning, autoCommit: false }
  // Unset: librdkafka's default isolation.level, read_committed.
  if (readUncommitted !== undefined) kafkaJS.readUncommitted = readUncommitted
  // metadataMaxAge is this layer's name for librdkafka's topic.metadata.refresh.interval.ms.
  if (metadataRefreshMs) kafkaJS.metadataMaxAge = metadataRefreshMs
  if (rack) kafkaJS.rackId = rack // the layer's name for client.rack
  // group.protocol is a librdkafka property beside the kafkaJS block (classic when unset).
  const c = kafka(opts, errors).consumer({ kafkaJS, ...(groupProtocol ? { 'group.protocol': groupProtocol } : {}) })
  await c.connect()
  await c.subscribe({ topics })
  await c.run({ eachMessage: async ({ message, partition }) => onMessage(message, partition) })
  const failIfCrashed = () => {
    if (logged.length) throw new Error(`consumer error: ${logged.join('; ')}`)
  }
  return {
    failIfCrashed,
    assigned: () =>
      h.waitFor(`consumer in ${groupId} gets its assignment`, 20000, () => (failIfCrashed(), c.assignment().length ? null : 'none yet')),
    commit: (topic, offset) => c.commitOffsets([{ topic, partition: 0, offset: String(offset) }]),
    close: () => c.disconnect().catch(e => console.error(`[${NAME}] disconnect failed: ${e.message}`)),
    native: c,
  }
}

/** A transactional producer; this layer's sendOffsets takes the consumer itself, not a group id. */
async function transactional(opts, transactionalId) {
  const producer = kafka(opts).producer({ kafkaJS: { transactionalId, idempotent: true } })
  await producer.connect()
  let tx
  return {
    begin: async () => (tx = await producer.transaction()),
    send: (topic, values) => tx.send({ topic, messages: values.map(v => ({ value: Buffer.from(v), partition: 0 })) }),
    sendOffsets: (consumer, _groupId, topic, offset) =>
      tx.sendOffsets({ consumer: consumer.native, topics: [{ topic, partitions: [{ partition: 0, offset: String(offset) }] }] }),
    commit: () => tx.commit(),
    abort: () => tx.abort(),
    close: () => producer.disconnect(),
  }
}

/** Runs `fn(client, callback)` on a connected classic-API client and disconnects it. */
function withClassic(client, fn) {
  return new Promise((resolve, reject) => {
    fn(client, (err, value) => {
      client.disconnect()
      return err ? reject(err) : resolve(value)
    })
  })
}

async function brokers(opts) {
  const producer = new rdkafka.Producer({ 'bootstrap.servers': opts.brokers.join(',') })
  await new Promise((resolve, reject) => producer.connect({}, err => (err ? reject(err) : resolve())))
  const md = await withClassic(producer, (p, done) => p.getMetadata({ timeout: 10000 }, done))
  return md.brokers.map(b => `${b.host}:${b.port}`)
}

function addPartitions(opts, _admin, topic, count) {
  const client = rdkafka.AdminClient.create({ 'bootstrap.servers': opts.brokers.join(',') })
  return withClassic(client, (a, done) => a.createPartitions(topic, count, 10000, done))
}

const noConfigs = () => {
  throw new h.NotApplicable(`${NAME} 1.10.1 has no call to alter or describe configs`)
}

// Built here from its bundled librdkafka against the system's libraries (CKJS_LINKING=dynamic),
// since the prebuilt binary cannot be downloaded: a codec whose library was missing at build
// time is absent.
const codec = (name, value) =>
  rdkafka.features.includes(name)
    ? value
    : new h.NotApplicable(`this build of librdkafka ${rdkafka.librdkafkaVersion} has no ${name} (built without lib${name}-dev; features: ${rdkafka.features.join(',')})`)

h.main(
  NAME,
  scenarios({
    admin,
    produce,
    consumer,
    transactional,
    brokers,
    setRetention: noConfigs,
    retention: noConfigs,
    addPartitions,
    stable: group => group.state === ConsumerGroupStates.STABLE,
    compression: {
      gzip: codec('gzip', CompressionTypes.GZIP),
      snappy: codec('snappy', CompressionTypes.SNAPPY),
      lz4: codec('lz4', CompressionTypes.LZ4),
      zstd: codec('zstd', CompressionTypes.ZSTD),
    },
    regexNotApplicable: null,
    groupProtocolNotApplicable: null,
    groupType: g => ({ [ConsumerGroupTypes.CONSUMER]: 'consumer', [ConsumerGroupTypes.CLASSIC]: 'classic' })[g.type] || `type ${g.type}`,
    shareNotApplicable: `${NAME} 1.10.1 has no share consumer (KIP-932) in its KafkaJS layer or its classic (node-rdkafka) API`,
    securityNote: scenario =>
      scenario === 'oauthbearer'
        ? "admin calls start once the token provider has run: they block Node's event loop, which sets the token (see the adapter)"
        : undefined,
    // Like the codecs, TLS and the SASL mechanisms are what librdkafka found at build time.
    securityNotApplicable(scenario) {
      const needs = {
        sasl_ssl_scram512: ['ssl', 'sasl_scram'],
        sasl_ssl_plain: ['ssl', 'sasl_plain'],
        sasl_plaintext_scram256: ['sasl_scram'],
        ssl_mtls: ['ssl'],
        oauthbearer: ['ssl', 'sasl_oauthbearer'],
        sasl_wrong_password: ['ssl', 'sasl_scram'],
      }[scenario]
      const missing = needs.filter(f => !rdkafka.features.includes(f))
      return missing.length
        ? `this build of librdkafka ${rdkafka.librdkafkaVersion} has no ${missing.join(', ')} (features: ${rdkafka.features.join(',')})`
        : null
    },
  })
)
