// The matrix scenarios for clients with a KafkaJS-shaped API (kafkajs itself and
// @confluentinc/kafka-javascript's KafkaJS layer). Each adapter passes a `client` facade for
// what differs between them:
//   admin(opts, errors?)                 connected admin (createTopics, deleteTopics, listTopics,
//                                        fetchTopicMetadata, fetchTopicOffsets[ByTimestamp],
//                                        deleteTopicRecords, listGroups, describeGroups,
//                                        fetchOffsets, disconnect); errors its client logs go to
//                                        `errors` when given
//   produce(opts, topic, records, {acks, compression, idempotent})
//   consumer(opts, groupId, topics, {fromBeginning, metadataRefreshMs}) -> started consumer
//                                        whose messages go to an `onMessage(message)` callback,
//                                        with commit(topic, offset), assigned() and close()
//   brokers(opts, admin)                 ["host:port", ...] from the client's metadata call
//   setRetention(admin, topic), retention(admin, topic)   (may throw NotApplicable)
//   addPartitions(opts, admin, topic, count)
//   stable(describedGroup)               whether its state is Stable
//   compression.{gzip,snappy,lz4,zstd}   the codec value, or a NotApplicable to throw
//   regexNotApplicable                   a reason, or null when regex subscribe is supported
//   securityNotApplicable(scenario)      a reason a security row cannot run, or null
//   securityNote(scenario)               optional: a security row's pass note
//   transactional(opts, transactionalId) connected transactional producer: begin(), send(topic,
//                                        values) (acknowledged), sendOffsets(consumer, groupId,
//                                        topic, offset), commit(), abort(), close(); or
//                                        undefined when the client has no transactions
// consumer() also takes {readUncommitted} (false: read_committed) and returns `native`, the
// client's own consumer object (what sendOffsets may need).
// The security rows call the same admin/produce/consumer with `opts.login` set (h.secured):
// the adapter's client factory applies that login's TLS and SASL settings.
'use strict'

const h = require('./harness')
const groupRows = require('./group-rows')

module.exports = function scenarios(client) {
  async function withAdmin(opts, fn) {
    const admin = await client.admin(opts)
    try {
      return await fn(admin)
    } finally {
      await admin.disconnect()
    }
  }

  // kafkajs answers {topics: [...]}, the confluent layer the array itself.
  const topicMetadata = async (admin, topics) => {
    const md = await admin.fetchTopicMetadata({ topics })
    return md.topics || md
  }

  async function awaitLeaders(admin, topics, partitions) {
    await h.waitFor(`${topics.length} topic(s) with ${partitions} partition(s) with leaders`, 15000, async () => {
      // One Metadata request naming every topic. A broker that has not yet heard of a topic just
      // created answers UNKNOWN_TOPIC_OR_PARTITION (Kafka too): not ready yet, ask again.
      let md
      try {
        md = await topicMetadata(admin, topics)
      } catch (e) {
        return `metadata: ${h.describe(e)}`
      }
      const ready = md.filter(t => t.partitions.length === partitions && t.partitions.every(p => p.leader >= 0))
      return ready.length === topics.length ? null : `${ready.length} ready`
    })
  }

  async function createTopics(opts, admin, topics, numPartitions = 1) {
    const created = await admin.createTopics({
      topics: topics.map(topic => ({ topic, numPartitions, replicationFactor: opts.clusterSize })),
    })
    if (!created) throw new Error(`create topics ${topics[0]}...: a topic already exists`)
    await awaitLeaders(admin, topics, numPartitions)
  }

  const createTopic = (opts, topic, partitions) => withAdmin(opts, admin => createTopics(opts, admin, [topic], partitions))

  async function topicWith(opts, topic, records) {
    await createTopic(opts, topic)
    await client.produce(opts, topic, records, {})
  }

  /** A consumer that collects what it receives; `received(n)` waits for the first n. */
  async function collector(opts, groupId, topics, options = {}) {
    const got = []
    const c = await client.consumer(opts, groupId, topics, { ...options, onMessage: m => got.push(m) })
    return {
      ...c,
      got,
      async received(n, ms = 25000) {
        await h.waitFor(`${n} records in ${groupId}`, ms, () => (c.failIfCrashed(), got.length >= n ? null : `${got.length} so far`))
        return got.slice(0, n)
      },
    }
  }

  async function readBack(opts, topic, n) {
    const reader = await collector(opts, `${opts.prefix}reader-${topic}`, [topic])
    try {
      return await reader.received(n)
    } finally {
      reader.close()
    }
  }

  async function produceVerify(opts, name, n, produceOptions) {
    const topic = `${opts.prefix}${name}`
    const sent = h.testRecords(n)
    await createTopic(opts, topic)
    await client.produce(opts, topic, sent, produceOptions)
    h.sameRecords(sent, await readBack(opts, topic, n))
  }

  const compression = codec => opts => {
    const value = client.compression[codec]
    if (value instanceof h.NotApplicable) throw value
    return produceVerify(opts, `compression-${codec}`, 100, { acks: -1, compression: value })
  }

  async function describeAndLag(admin, group, topic) {
    const { groups } = await admin.listGroups()
    if (!groups.some(g => g.groupId === group)) throw new Error(`list groups does not show ${group}`)
    const described = (await admin.describeGroups([group])).groups[0]
    if (!client.stable(described) || described.members.length !== 1) {
      throw new Error(`describe group: state ${described.state} with ${described.members.length} members, want Stable with 1`)
    }
    const [committed] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
    const at = Number(committed.partitions[0].offset)
    const [end] = await admin.fetchTopicOffsets(topic)
    const lag = Number(end.high) - at
    if (at !== 60 || lag !== 40) throw new Error(`committed ${at}, end ${end.high}, lag ${lag}; want 60, 100, 40`)
  }

  // The transaction rows: a transactional producer (client.transactional), read back by group
  // consumers from the beginning with read_committed (readUncommitted: false) or not.
  const TX_COMMITTED_1 = 10, TX_ABORTED = 10, TX_COMMITTED_2 = 5
  const CTP_INPUTS = 20, CTP_TX_SIZE = 10, CTP_ABORTED = 5
  const txValues = (tag, n) => Array.from({ length: n }, (_, i) => `${tag}-${i}`)

  async function transactional(opts, name) {
    if (!client.transactional) throw new h.NotApplicable('this client has no transactional producer')
    return client.transactional(opts, `${opts.prefix}${name}`)
  }

  function sameValues(what, want, got) {
    const values = got.map(m => String(m.value))
    if (JSON.stringify(values) !== JSON.stringify(want)) throw new Error(`${what}: read ${values.join(',')}, expected ${want.join(',')}`)
  }

  /** Reads exactly `want` (then nothing more within a second) from the beginning of `topic`. */
  async function readIsolated(opts, topic, readUncommitted, want, what) {
    const group = `${opts.prefix}${readUncommitted ? 'uncommitted' : 'committed'}-reader-${topic}`
    const reader = await collector(opts, group, [topic], { readUncommitted })
    try {
      sameValues(what, want, await reader.received(want.length))
      await h.sleep(1000) // a bounded look: no record beyond those may arrive
      reader.failIfCrashed()
      if (reader.got.length !== want.length) throw new Error(`${what}: ${reader.got.length - want.length} records more than expected`)
    } finally {
      reader.close()
    }
  }

  async function inTransaction(p, topic, values, commit) {
    await p.begin()
    await p.send(topic, values)
    await (commit ? p.commit() : p.abort())
  }

  async function transactionsCommitAbort(opts) {
    const topic = `${opts.prefix}tx-commit-abort`
    await createTopic(opts, topic)
    const first = txValues('c1', TX_COMMITTED_1), aborted = txValues('a', TX_ABORTED), second = txValues('c2', TX_COMMITTED_2)
    const p = await transactional(opts, 'tx-commit-abort')
    try {
      await inTransaction(p, topic, first, true)
      await inTransaction(p, topic, aborted, false)
      await inTransaction(p, topic, second, true)
    } finally {
      await p.close()
    }
    await readIsolated(opts, topic, false, [...first, ...second], 'read_committed')
    await readIsolated(opts, topic, true, [...first, ...aborted, ...second], 'read_uncommitted')
  }

  async function readCommitted(opts) {
    const topic = `${opts.prefix}read-committed`
    await createTopic(opts, topic)
    const before = txValues('before', 5), open = txValues('open', 5)
    const p = await transactional(opts, 'read-committed')
    let reader
    try {
      await inTransaction(p, topic, before, true)
      await p.begin()
      await p.send(topic, open)
      reader = await collector(opts, `${opts.prefix}read-committed-reader`, [topic], { readUncommitted: false })
      sameValues('before the open transaction', before, await reader.received(before.length))
      await h.sleep(3000) // a bounded look: nothing of the open transaction may arrive
      reader.failIfCrashed()
      if (reader.got.length !== before.length) throw new Error(`delivered ${reader.got.length - before.length} records of the open transaction`)
      await p.commit()
      sameValues('after the commit', [...before, ...open], await reader.received(before.length + open.length))
    } finally {
      if (reader) reader.close()
      await p.close()
    }
  }

  async function consumeTransformProduce(opts) {
    const source = `${opts.prefix}ctp-in`, sink = `${opts.prefix}ctp-out`, group = `${opts.prefix}ctp`
    await createTopic(opts, source)
    await createTopic(opts, sink)
    const inputs = txValues('in', CTP_INPUTS + CTP_ABORTED)
    await client.produce(opts, source, inputs.slice(0, CTP_INPUTS).map(v => ({ value: Buffer.from(v) })), { acks: -1 })
    const p = await transactional(opts, 'ctp')
    const c = await collector(opts, group, [source], { readUncommitted: false })
    const committed = () =>
      withAdmin(opts, async admin => Number((await admin.fetchOffsets({ groupId: group, topics: [source] }))[0].partitions[0].offset))
    try {
      let done = 0
      const round = async (n, commit) => {
        const got = (await c.received(done + n)).slice(done)
        done += n
        await p.begin()
        await p.send(sink, got.map(m => `out-${m.value}`))
        await p.sendOffsets(c, group, source, Number(got[got.length - 1].offset) + 1)
        await (commit ? p.commit() : p.abort())
      }
      for (let i = 0; i < CTP_INPUTS / CTP_TX_SIZE; i++) await round(CTP_TX_SIZE, true)
      // The client's OffsetFetch may not ask for stable offsets: a transactional commit shows
      // once the coordinator has written the transaction's markers.
      await h.waitFor(`committed offset ${CTP_INPUTS}`, 15000, async () => {
        const at = await committed()
        return at === CTP_INPUTS ? null : `at ${at}`
      })
      await client.produce(opts, source, inputs.slice(CTP_INPUTS).map(v => ({ value: Buffer.from(v) })), { acks: -1 })
      await round(CTP_ABORTED, false)
      // Once a read_committed reader got the output, the abort marker is written.
      await readIsolated(opts, sink, false, inputs.slice(0, CTP_INPUTS).map(v => `out-${v}`), 'the output, read_committed')
      const at = await committed()
      if (at !== CTP_INPUTS) throw new Error(`committed offset ${at} after an aborted transaction, expected ${CTP_INPUTS}`)
    } finally {
      c.close()
      await p.close()
    }
  }

  // The security rows: log in as the --security file says, create a topic, produce 50 values
  // with acks=all, read them all in a group, commit, and read the committed offset back.
  const SECURE_RECORDS = 50

  async function secureRoundTrip(opts, scenario) {
    const why = client.securityNotApplicable && client.securityNotApplicable(scenario)
    if (why) throw new h.NotApplicable(why)
    const sopts = h.secured(opts, scenario)
    const topic = `${opts.prefix}${scenario.replace(/_/g, '-')}`
    const group = `${opts.prefix}${scenario}-group`
    await createTopic(sopts, topic)
    const values = Array.from({ length: SECURE_RECORDS }, (_, i) => `${topic}-${i}`)
    await client.produce(sopts, topic, values.map(v => ({ value: Buffer.from(v) })), { acks: -1 })
    const c = await collector(sopts, group, [topic])
    try {
      const got = (await c.received(SECURE_RECORDS)).map(m => String(m.value))
      got.forEach((v, i) => {
        if (v !== values[i]) throw new Error(`record ${i} read back as ${v}, sent ${values[i]}`)
      })
      await c.commit(topic, SECURE_RECORDS)
    } finally {
      c.close() // in the background, as the other rows' members: the commit above was awaited
    }
    await withAdmin(sopts, async admin => {
      const [committed] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
      const at = Number(committed.partitions[0].offset)
      if (at !== SECURE_RECORDS) throw new Error(`committed offset ${at}, want ${SECURE_RECORDS}`)
    })
    return client.securityNote && client.securityNote(scenario)
  }

  const secureRows = Object.fromEntries(
    ['sasl_ssl_scram512', 'sasl_ssl_plain', 'sasl_plaintext_scram256', 'ssl_mtls', 'oauthbearer'].map(s => [
      s,
      opts => secureRoundTrip(opts, s),
    ])
  )

  return {
    ...secureRows,
    ...groupRows(client, { withAdmin, createTopic, topicMetadata }),

    // A SCRAM-SHA-512 login with a wrong password: the admin client must report the broker's
    // SASL_AUTHENTICATION_FAILED ("Authentication failed ...") and list nothing.
    async sasl_wrong_password(opts) {
      const why = client.securityNotApplicable && client.securityNotApplicable('sasl_wrong_password')
      if (why) throw new h.NotApplicable(why)
      const sopts = h.secured(opts, 'sasl_wrong_password')
      const logged = [] // what the client reports through its logger (the librdkafka-based one)
      // Without librdkafka's thread and broker address before the message and its timing after.
      const clean = t => t.replace(/^\[thrd:[^\]]*\]: /, '').replace(/^\w+:\/\/\S+: /, '').replace(/ \(after \d+ms in state [^)]*\)$/, '')
      const refusal = reports => reports.map(clean).find(t => t.includes('Authentication failed'))
      let admin
      try {
        admin = await client.admin(sopts, logged)
        // The librdkafka-based client logs the refusal at once, but fails a call only at the
        // call's timeout (which blocks Node's event loop meanwhile): its log is read first.
        await h.waitFor('a refused login in the log', 3000, () => (refusal(logged) ? null : 'nothing yet')).catch(() => {})
        if (refusal(logged)) return refusal(logged)
        await admin.listTopics()
        throw new Error('listing topics succeeded with a wrong password')
      } catch (e) {
        const reports = [h.describe(e), ...logged]
        const refused = refusal(reports)
        if (!refused) throw new Error(`expected "Authentication failed", the client reported: ${reports.map(clean).join('; ')}`)
        return refused
      } finally {
        if (admin) admin.disconnect().catch(() => {})
      }
    },

    async metadata(opts) {
      const topic = `${opts.prefix}metadata`
      await createTopic(opts, topic)
      await withAdmin(opts, async admin => {
        const listed = (await client.brokers(opts, admin)).sort()
        const want = [...opts.brokers].sort()
        if (listed.join() !== want.join()) throw new Error(`metadata lists brokers ${listed}, want ${want}`)
        const topics = await topicMetadata(admin, [topic])
        if (topics.length !== 1 || topics[0].partitions.length !== 1) {
          throw new Error(`topic metadata ${JSON.stringify(topics)}, want ${topic} with 1 partition`)
        }
      })
    },

    // Every step runs even after one fails (each later step needs only the topic), so one
    // answer shows all that differs. A config step the client cannot express makes the
    // scenario n/a only when every other step passed.
    async admin_topics(opts) {
      const topic = `${opts.prefix}admin`
      const failures = []
      let notApplicable
      const step = async (what, fn) => {
        try {
          await fn()
          return true
        } catch (e) {
          if (e instanceof h.NotApplicable) notApplicable = e
          else failures.push(`${what}: ${e.message}${e.type ? ` (${e.type})` : ''}`)
          return false
        }
      }
      await withAdmin(opts, async admin => {
        await createTopics(opts, admin, [topic], 3)
        const altered = await step('alter configs', () => client.setRetention(admin, topic))
        if (altered) {
          await step('describe configs', async () => {
            const value = await client.retention(admin, topic)
            if (value !== '3600000') throw new Error(`retention.ms is ${value}, want 3600000`)
          })
        }
        await step('create partitions to 5', async () => {
          await client.addPartitions(opts, admin, topic, 5)
          await awaitLeaders(admin, [topic], 5)
        })
        await step('delete topic', async () => {
          await admin.deleteTopics({ topics: [topic] })
          await h.waitFor('deleted topic gone from list topics', 10000, async () =>
            (await admin.listTopics()).includes(topic) ? 'still listed' : null
          )
        })
      })
      if (failures.length) throw new Error(failures.join('; '))
      if (notApplicable) throw new h.NotApplicable(`${notApplicable.message}; create, describe, add partitions and delete passed`)
    },

    produce_acks0: opts => produceVerify(opts, 'acks0', 100, { acks: 0 }),
    produce_acks1: opts => produceVerify(opts, 'acks1', 100, { acks: 1 }),
    produce_acksall: opts => produceVerify(opts, 'acksall', 100, { acks: -1 }),
    compression_gzip: compression('gzip'),
    compression_snappy: compression('snappy'),
    compression_lz4: compression('lz4'),
    compression_zstd: compression('zstd'),
    idempotent_produce: opts => produceVerify(opts, 'idempotent', 1000, { acks: -1, idempotent: true }),

    async group_resume(opts) {
      const [topic, group] = [`${opts.prefix}resume`, `${opts.prefix}resume-group`]
      const sent = h.testRecords(100)
      await topicWith(opts, topic, sent)
      const first = await collector(opts, group, [topic])
      try {
        h.sameRecords(sent.slice(0, 50), await first.received(50))
        await first.commit(topic, 50)
      } finally {
        // The next member must find the group empty, not wait for this one to leave.
        await first.close()
      }
      const second = await collector(opts, group, [topic])
      try {
        h.sameRecords(sent.slice(50), await second.received(50), 50)
      } finally {
        second.close()
      }
    },

    async two_groups(opts) {
      const topic = `${opts.prefix}twogroups`
      const sent = h.testRecords(100)
      await topicWith(opts, topic, sent)
      await Promise.all(
        ['a', 'b'].map(async g => {
          const c = await collector(opts, `${opts.prefix}twogroups-${g}`, [topic])
          try {
            h.sameRecords(sent, await c.received(100))
          } finally {
            c.close()
          }
        })
      )
    },

    async groups_describe_lag(opts) {
      const [topic, group] = [`${opts.prefix}lag`, `${opts.prefix}lag-group`]
      const sent = h.testRecords(100)
      await topicWith(opts, topic, sent)
      const live = await collector(opts, group, [topic])
      try {
        h.sameRecords(sent.slice(0, 60), await live.received(60))
        await live.commit(topic, 60)
        await withAdmin(opts, admin => describeAndLag(admin, group, topic))
      } finally {
        live.close()
      }
    },

    // Both clients answer "no record at or after" with the end offset, not -1.
    async offsets_for_times(opts) {
      const topic = `${opts.prefix}times`
      const sent = h.testRecords(3)
      const t0 = Number(sent[0].timestamp)
      sent.forEach((r, i) => (r.timestamp = String(t0 + 1000 * i)))
      await topicWith(opts, topic, sent)
      await withAdmin(opts, async admin => {
        for (const [dt, want] of [[500, '1'], [2000, '2'], [3000, '3']]) {
          const [p] = await admin.fetchTopicOffsetsByTimestamp(topic, t0 + dt)
          if (String(p.offset) !== want) throw new Error(`offsets for time t0+${dt}: ${p.offset}, want ${want}`)
        }
      })
      return 'past the last record answers the end offset (3), the client\'s stand-in for -1'
    },

    async delete_records(opts) {
      const topic = `${opts.prefix}delrecords`
      const sent = h.testRecords(100)
      await topicWith(opts, topic, sent)
      await withAdmin(opts, async admin => {
        // kafkajs 2.2.4's deleteTopicRecords looks leaders up in its metadata cache without
        // loading it ("Topic metadata not loaded"); listing offsets loads it.
        await admin.fetchTopicOffsets(topic)
        await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '30' }] })
        const [p] = await admin.fetchTopicOffsets(topic)
        if (String(p.low) !== '30') throw new Error(`low watermark after delete records: ${p.low}, want 30`)
      })
      h.sameRecords(sent.slice(30), await readBack(opts, topic, 70), 30)
    },

    async empty_topic(opts) {
      const topic = `${opts.prefix}empty`
      await createTopic(opts, topic)
      const readers = await Promise.all([
        collector(opts, `${opts.prefix}empty-start`, [topic], { fromBeginning: true }),
        collector(opts, `${opts.prefix}empty-end`, [topic], { fromBeginning: false }),
      ])
      try {
        await Promise.all(readers.map(r => r.assigned()))
        await h.sleep(1500) // the short poll: nothing may arrive and nothing may fail
        for (const r of readers) {
          r.failIfCrashed()
          if (r.got.length) throw new Error(`a consumer got ${r.got.length} records from the empty topic`)
        }
        const sent = h.testRecords(1)
        await client.produce(opts, topic, sent, {})
        for (const r of readers) h.sameRecords(sent, await r.received(1, 10000))
      } finally {
        readers.forEach(r => r.close())
      }
    },

    async many_topics(opts) {
      const topics = Array.from({ length: 200 }, (_, i) => `${opts.prefix}many-${String(i).padStart(3, '0')}`)
      const started = Date.now()
      await withAdmin(opts, async admin => {
        for (let i = 0; i < topics.length; i += 50) {
          const created = await admin.createTopics({
            topics: topics.slice(i, i + 50).map(topic => ({ topic, numPartitions: 1, replicationFactor: opts.clusterSize })),
          })
          if (!created) throw new Error(`create topics ${i}..${i + 49}: a topic already exists`)
        }
        await awaitLeaders(admin, topics, 1)
        for (let i = 0; i < topics.length; i += 50) await admin.deleteTopics({ topics: topics.slice(i, i + 50) })
        await h.waitFor('deleted topics gone', 20000, async () => {
          const left = (await admin.listTopics()).filter(t => topics.includes(t))
          return left.length ? `${left.length} still listed` : null
        })
      })
      return `200 topics with leaders ${Date.now() - started} ms after the first create`
    },

    transactions_commit_abort: transactionsCommitAbort,
    read_committed: readCommitted,
    consume_transform_produce: consumeTransformProduce,

    async regex_subscribe(opts) {
      if (client.regexNotApplicable) throw new h.NotApplicable(client.regexNotApplicable)
      const topic = `${opts.prefix}regex-late`
      const pattern = new RegExp(`^${h.escapeRegExp(opts.prefix)}regex-.*`)
      // The one allowed non-default: a 2 s metadata refresh, so the new topic is seen.
      const c = await collector(opts, `${opts.prefix}regex-group`, [pattern], { metadataRefreshMs: 2000 })
      try {
        // A window in which the subscription runs before the topic exists: nothing may arrive.
        await h.sleep(1000)
        c.failIfCrashed()
        if (c.got.length) throw new Error(`regex consumer got ${c.got.length} records before the topic existed`)
        const sent = h.testRecords(1)
        await topicWith(opts, topic, sent)
        const produced = Date.now()
        h.sameRecords(sent, await c.received(1, 20000))
        return `record arrived ${Date.now() - produced} ms after it was produced`
      } finally {
        c.close()
      }
    },
  }
}
