// The part of the compatibility-matrix contract (issue 11 §3) shared by the JavaScript
// adapters: argument parsing, one JSON line per scenario on stdout, a deadline per scenario,
// and the test records with their exact comparison. Anything but result lines goes to stderr.
'use strict'

const fs = require('fs')

/** A scenario this client cannot express; the message is the reason. */
class NotApplicable extends Error {}

function parseArgs(argv) {
  const opts = {}
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]]
    if (value === undefined) throw new Error(`${flag} needs a value`)
    opts[flag.replace(/^--/, '')] = value
  }
  for (const need of ['bootstrap', 'brokers', 'prefix', 'scenarios']) {
    if (!opts[need]) {
      throw new Error('usage: --bootstrap HOST:PORT[,...] --brokers N --prefix P --security FILE --scenarios s1,s2,...')
    }
  }
  return {
    brokers: opts.bootstrap.split(','),
    clusterSize: Number(opts.brokers),
    prefix: opts.prefix,
    // The secured listeners' logins: {scenarios: {id: {bootstrap, security_protocol, ...}}}.
    security: opts.security ? JSON.parse(fs.readFileSync(opts.security, 'utf8')) : { error: 'no --security file given' },
    scenarios: opts.scenarios.split(','),
  }
}

/**
 * `opts` pointed at a security row's listener, with its --security entry as `opts.login`; each
 * adapter's client factory turns `login` into its own TLS and SASL settings.
 */
function secured(opts, scenario) {
  const login = (opts.security.scenarios || {})[scenario]
  if (!login) {
    throw new Error(`the --security file has no login for ${scenario}${opts.security.error ? `: ${opts.security.error}` : ''}`)
  }
  return { ...opts, brokers: login.bootstrap.split(','), login }
}

const DEFAULT_DEADLINE_MS = 40000
const DEADLINES_MS = { many_topics: 70000, idempotent_produce: 60000 }

function emit(scenario, result, detail) {
  process.stdout.write(JSON.stringify({ scenario, result, detail }) + '\n')
}

/**
 * Runs each requested scenario from `scenarios` (id -> async (opts) => note) in turn, then the
 * security rows side by side (SIDE_BY_SIDE). A scenario past its deadline is reported failed
 * and left behind; the process exits when all are reported, so a stuck client cannot hold it.
 */
async function main(name, scenarios) {
  // A client's stray rejection or exception (say, from a consumer closing in the background)
  // must not end the run: Node would exit and every scenario not yet reported would be lost.
  process.on('unhandledRejection', e => console.error(`[${name}] unhandled rejection: ${describe(e)}`))
  process.on('uncaughtException', e => console.error(`[${name}] uncaught exception: ${describe(e)}`))
  let opts
  try {
    opts = parseArgs(process.argv.slice(2))
  } catch (e) {
    console.error(e.message)
    process.exit(2)
  }
  const report = async id => {
    const started = Date.now()
    let result
    if (id.startsWith('tool_')) {
      result = ['n/a', 'not a client-library feature']
    } else if (!scenarios[id]) {
      result = ['fail', `this adapter does not know scenario ${id}`]
    } else {
      result = await runOne(scenarios[id], opts, DEADLINES_MS[id] || DEFAULT_DEADLINE_MS)
    }
    console.error(`[${name}] ${id} finished in ${Date.now() - started} ms: ${result.join(': ')}`)
    emit(id, ...result)
  }
  for (const id of opts.scenarios.filter(id => !SIDE_BY_SIDE.has(id))) await report(id)
  await Promise.all(opts.scenarios.filter(id => SIDE_BY_SIDE.has(id)).map(report))
  process.exit(0)
}

// The security rows run side by side, after the others: each has its own topic, group and
// login, and spends most of its time in its group's first join (the broker's
// group.initial.rebalance.delay.ms), so one after another they would only add up waits.
const SIDE_BY_SIDE = new Set([
  'sasl_ssl_scram512',
  'sasl_ssl_plain',
  'sasl_plaintext_scram256',
  'ssl_mtls',
  'oauthbearer',
  'sasl_wrong_password',
])

async function runOne(fn, opts, deadlineMs) {
  let timer
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`scenario did not finish within ${deadlineMs} ms`)), deadlineMs)
  })
  try {
    const note = await Promise.race([fn(opts), deadline])
    return ['pass', note || '']
  } catch (e) {
    if (e instanceof NotApplicable) return ['n/a', e.message]
    return ['fail', describe(e)]
  } finally {
    clearTimeout(timer)
  }
}

/**
 * An error's message with what the clients nest inside it: causes, and the per-partition
 * errors of the DeleteTopicRecords error both KafkaJS-shaped clients throw.
 */
function describe(e) {
  const parts = [e && e.message ? e.message : String(e)]
  for (let c = e && e.cause; c; c = c.cause) parts.push(c.message || String(c))
  for (const p of (e && e.partitions) || []) {
    if (p.error) parts.push(`partition ${p.partition}: ${p.error.message || p.error}${p.error.code ? ` (code ${p.error.code})` : ''}`)
  }
  if (e && e.type && !parts[0].includes(e.type)) parts.push(`type ${e.type}`)
  return parts.join(': ')
}

/**
 * `n` test records: keys, two headers (one binary) and CreateTime timestamps a minute in the
 * past, one millisecond apart.
 */
function testRecords(n) {
  const t0 = Date.now() - 60000
  return Array.from({ length: n }, (_, i) => ({
    key: Buffer.from(`key-${i}`),
    value: Buffer.from(`value-${i}-${'x'.repeat(i % 7)}`),
    headers: { text: Buffer.from(`h-${i}`), binary: Buffer.from([0x00, 0xff, i & 0xff, 0x80, 0x00]) },
    timestamp: String(t0 + i),
  }))
}

/**
 * Checks that `got` (records as {offset, key, value, headers, timestamp}) is exactly `sent`,
 * in order, starting at offset `from`.
 */
function sameRecords(sent, got, from = 0) {
  if (got.length !== sent.length) throw new Error(`read ${got.length} records, sent ${sent.length}`)
  sent.forEach((s, i) => {
    const g = got[i]
    const where = `record ${i} (offset ${g.offset})`
    if (Number(g.offset) !== from + i) throw new Error(`${where}: want offset ${from + i}`)
    if (!Buffer.from(g.key || []).equals(s.key) || !Buffer.from(g.value || []).equals(s.value)) {
      throw new Error(`${where}: read key ${g.key} value ${g.value}, sent key ${s.key} value ${s.value}`)
    }
    if (String(g.timestamp) !== s.timestamp) {
      throw new Error(`${where}: read timestamp ${g.timestamp}, sent ${s.timestamp}`)
    }
    const [gk, sk] = [Object.keys(g.headers || {}), Object.keys(s.headers)]
    const sameHeaders =
      gk.join() === sk.join() && sk.every(k => Buffer.from(g.headers[k] || []).equals(s.headers[k]))
    if (!sameHeaders) throw new Error(`${where}: read headers ${fmtHeaders(g.headers)}, sent ${fmtHeaders(s.headers)}`)
  })
}

function fmtHeaders(h) {
  return JSON.stringify(Object.fromEntries(Object.entries(h || {}).map(([k, v]) => [k, Buffer.from(v).toString('hex')])))
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

/** Polls `check` (returning a falsy value when done, else why not) until done or `ms` pass. */
async function waitFor(what, ms, check) {
  const end = Date.now() + ms
  let why
  while (Date.now() < end) {
    why = await check()
    if (!why) return
    await sleep(100)
  }
  throw new Error(`${what}: still not true after ${ms} ms (${why})`)
}

function escapeRegExp(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

module.exports = { NotApplicable, main, secured, describe, testRecords, sameRecords, sleep, waitFor, escapeRegExp }
