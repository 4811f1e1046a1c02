// The group_kip848, group_migration, share_group and fetch_from_follower rows for the
// KafkaJS-shaped clients (compat/README.md). Besides scenarios.js's facade they use:
//   groupProtocolNotApplicable   a reason the client has no group.protocol=consumer, or null
//   shareNotApplicable           a reason the client has no share consumer
//   groupType(listedGroup)       'classic' or 'consumer' from admin.listGroups()'s entry
// and consumer() options {groupProtocol: 'classic' | 'consumer', rack}; onMessage gets
// (message, partition).
'use strict'

const http = require('http')
const h = require('./harness')

const PARTITIONS = 3
const FOLLOWER_RECORDS = 100

module.exports = function groupRows(client, { withAdmin, createTopic, topicMetadata }) {
  /** perPartition records on each of the topic's partitions, value `<topic>-<partition>-<i>`. */
  async function produceSpread(opts, topic, perPartition) {
    for (let p = 0; p < PARTITIONS; p++) {
      const records = Array.from({ length: perPartition }, (_, i) => ({ value: Buffer.from(`${topic}-${p}-${i}`) }))
      await client.produce(opts, topic, records, { acks: -1, partition: p })
    }
  }

  /**
   * A group member that commits each record's next offset as it reads it (so a partition that
   * moves to another member carries on from there) and records what it read, by partition.
   */
  async function member(opts, group, topic, groupProtocol, reads, index) {
    let c
    const onMessage = async (message, partition) => {
      const seen = (reads.offsets[partition] = reads.offsets[partition] || [])
      const offset = Number(message.offset)
      if (seen.includes(offset)) reads.duplicate = `partition ${partition} offset ${offset} was read twice`
      seen.push(offset)
      reads.perMember[index] = (reads.perMember[index] || 0) + 1
      reads.total++
      await c.native.commitOffsets([{ topic, partition, offset: String(offset + 1) }])
    }
    c = await client.consumer(opts, group, [topic], { groupProtocol, onMessage })
    return c
  }

  const newReads = () => ({ offsets: {}, perMember: {}, total: 0, duplicate: null })

  /** Waits for `count` records in `reads`, then half a second for anything more. */
  async function drained(members, reads, count) {
    await h.waitFor(`${count} records`, 30000, () => {
      members.forEach(m => m.failIfCrashed())
      return reads.total >= count ? null : `${reads.total} so far`
    })
    await h.sleep(500) // a window in which a record read twice would show
    if (reads.duplicate) throw new Error(reads.duplicate)
  }

  function expectOffsets(reads, from, to) {
    for (let p = 0; p < PARTITIONS; p++) {
      const got = reads.offsets[p] || []
      const want = Array.from({ length: to - from }, (_, i) => from + i)
      if (got.join() !== want.join()) throw new Error(`partition ${p} read offsets [${got}], expected ${from}..${to - 1}`)
    }
  }

  async function expectCommitted(opts, group, topic, offset) {
    await withAdmin(opts, async admin => {
      const [t] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
      const got = t.partitions.map(p => `${p.partition}:${p.offset}`).sort().join(' ')
      const want = Array.from({ length: PARTITIONS }, (_, p) => `${p}:${offset}`).join(' ')
      if (got !== want) throw new Error(`committed offsets ${got}, expected ${want}`)
    })
  }

  const listedType = (opts, group) =>
    withAdmin(opts, async admin => {
      const { groups } = await admin.listGroups()
      const g = groups.find(x => x.groupId === group)
      if (!g) throw new Error(`list groups does not show ${group}`)
      return client.groupType(g)
    })

  /** One member of `group` with `groupProtocol` reads the 10 records per partition after `from`. */
  async function phase(opts, group, topic, groupProtocol, from) {
    const reads = newReads()
    const m = await member(opts, group, topic, groupProtocol, reads, 0)
    try {
      await drained([m], reads, 10 * PARTITIONS)
      expectOffsets(reads, from, from + 10)
      return await listedType(opts, group)
    } finally {
      await m.close()
    }
  }

  function needsGroupProtocol() {
    if (client.groupProtocolNotApplicable) throw new h.NotApplicable(client.groupProtocolNotApplicable)
  }

  /** Records of `topic` each node sent to consumers (its /metrics), by node id. */
  async function sentByNode(urls, topic) {
    const out = {}
    for (const [node, url] of Object.entries(urls)) {
      const body = await new Promise((resolve, reject) => {
        http.get(url, res => {
          let data = ''
          res.on('data', d => (data += d))
          res.on('end', () => resolve(data))
        }).on('error', reject)
      })
      out[node] = body
        .split('\n')
        .filter(l => l.startsWith('kafka_server_brokertopicmetrics_messagesout') && l.includes(`topic="${topic}"`))
        .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0)
    }
    return out
  }

  return {
    async group_kip848(opts) {
      needsGroupProtocol()
      const [topic, group] = [`${opts.prefix}kip848`, `${opts.prefix}kip848`]
      await createTopic(opts, topic, PARTITIONS)
      const reads = newReads()
      const members = [await member(opts, group, topic, 'consumer', reads, 0), await member(opts, group, topic, 'consumer', reads, 1)]
      let split
      try {
        // The topic is empty: the members only heartbeat until the coordinator has split it.
        await h.waitFor('the coordinator to split the 3 partitions between the two members', 30000, () => {
          const owned = members.map(m => (m.failIfCrashed(), m.native.assignment().length))
          return owned[0] && owned[1] && owned[0] + owned[1] === PARTITIONS ? null : `owned ${owned.join('+')}`
        })
        split = members.map(m => m.native.assignment().length).join('+')
        await produceSpread(opts, topic, 20)
        await drained(members, reads, 20 * PARTITIONS)
        expectOffsets(reads, 0, 20)
        if (Object.keys(reads.perMember).length !== 2) throw new Error(`one member read everything: ${JSON.stringify(reads.perMember)}`)
      } finally {
        await Promise.all(members.map(m => m.close()))
      }
      await expectCommitted(opts, group, topic, 20)
      await produceSpread(opts, topic, 10)
      const type = await phase(opts, group, topic, 'consumer', 20)
      if (type !== 'consumer') throw new Error(`listed as a ${type} group, expected consumer`)
      await expectCommitted(opts, group, topic, 30)
      return `two members: ${split} partitions, records read ${Object.values(reads.perMember).join(' + ')}`
    },

    async group_migration(opts) {
      needsGroupProtocol()
      const [topic, group] = [`${opts.prefix}migration`, `${opts.prefix}migration`]
      await createTopic(opts, topic, PARTITIONS)
      const types = []
      for (const [n, protocol] of ['classic', 'consumer', 'classic'].entries()) {
        await produceSpread(opts, topic, 10)
        const type = await phase(opts, group, topic, protocol, 10 * n)
        if (type !== protocol) throw new Error(`with a ${protocol} member the group is listed as ${type}`)
        types.push(type)
        await expectCommitted(opts, group, topic, 10 * n + 10)
      }
      return `group type ${types.join(' -> ')}`
    },

    async share_group() {
      throw new h.NotApplicable(client.shareNotApplicable)
    },

    async fetch_from_follower(opts) {
      if (opts.clusterSize < 2) throw new h.NotApplicable('one node has no followers')
      const entry = ((opts.security || {}).scenarios || {}).fetch_from_follower || {}
      if (!entry.racks || !entry.metrics) throw new Error(`the --security file has no racks for fetch_from_follower: ${JSON.stringify(entry)}`)
      const topic = `${opts.prefix}follower`
      await createTopic(opts, topic, 1)
      await client.produce(opts, topic, h.testRecords(FOLLOWER_RECORDS), { acks: -1 })
      const [p] = (await withAdmin(opts, admin => topicMetadata(admin, [topic])))[0].partitions
      const follower = p.replicas.find(r => r !== p.leader)
      const rack = entry.racks[String(follower)]
      const offsets = []
      const c = await client.consumer(opts, `${opts.prefix}follower`, [topic], { rack, onMessage: m => offsets.push(Number(m.offset)) })
      try {
        await h.waitFor(`${FOLLOWER_RECORDS} records`, 30000, () => (c.failIfCrashed(), offsets.length >= FOLLOWER_RECORDS ? null : `${offsets.length} so far`))
      } finally {
        c.close()
      }
      const want = Array.from({ length: FOLLOWER_RECORDS }, (_, i) => i)
      if (offsets.slice(0, FOLLOWER_RECORDS).join() !== want.join()) throw new Error(`offsets read ${offsets.slice(0, 5)}..., expected 0..99`)
      const sent = await sentByNode(entry.metrics, topic)
      if (!(sent[follower] >= FOLLOWER_RECORDS) || sent[p.leader] !== 0) {
        throw new Error(`records sent to consumers by node ${JSON.stringify(sent)}: expected all ${FOLLOWER_RECORDS} from follower ${follower} (${rack}) and none from leader ${p.leader}`)
      }
      return `client.rack=${rack}: follower ${follower} sent the records, leader ${p.leader} none`
    },
  }
}
