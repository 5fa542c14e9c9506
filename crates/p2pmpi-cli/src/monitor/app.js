// p2pmpi grid monitor: the page's script (the project's own, plain JavaScript and SVG).
// It follows the monitor's server-sent events (/api/events): each event is the whole grid
// as the monitor last saw it, and the page is drawn again from it. Everything shown is set
// as text (never as HTML), so nothing a peer reports can run here.
'use strict';

// The token: the monitor put it in this script's own address (also when the page was
// fetched with a bearer header instead of ?token=).
const token = new URL(document.currentScript.src).searchParams.get('token') ||
  new URLSearchParams(location.search).get('token') || '';
const SVG = 'http://www.w3.org/2000/svg';
let grid = null;        // the last snapshot
let selected = null;    // the address of the peer shown in the details
const view = { x: 0, y: 0, w: 800, h: 360 };  // the graph's viewBox (zoom and pan)
let moved = false;      // the user zoomed or panned: the graph is no longer fitted

function el(tag, attrs, ...children) {
  const e = tag.startsWith('svg:') ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.setAttribute('class', v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

const gib = kb => (kb / 1048576).toFixed(1);
const time = ms => new Date(ms).toLocaleTimeString();
const shortJob = id => id.slice(0, 8);

function slots(p) {
  if (p.jobs === null || p.jobs === undefined) return `– · ${p.max_procs}/job`;
  const max = p.max_jobs === 0 ? '∞' : p.max_jobs;
  return `${p.jobs}/${max} jobs · ${p.max_procs}/job`;
}

function select(address) {
  selected = address;
  render();
}

// The peers' table.
function renderPeers() {
  const body = document.querySelector('#peers tbody');
  body.replaceChildren(...grid.peers.map(p => el('tr', {
    'data-address': p.address, 'data-status': p.status,
    class: p.address === selected ? 'selected' : '', onclick: () => select(p.address),
  },
    el('td', {}, p.name),
    el('td', {}, p.address),
    el('td', {}, p.os || '–'),
    el('td', {}, p.domain ? `${p.domain} (${p.subnet})` : p.subnet),
    el('td', { class: 'status-' + p.status, title: p.error || '' }, p.status),
    el('td', {}, slots(p)),
    el('td', {}, p.load1 === null ? '–' : `${p.load1.toFixed(2)} on ${p.cpus} CPU(s)`),
    el('td', {}, p.mem_total_kb ? `${gib(p.mem_available_kb)} / ${gib(p.mem_total_kb)} GiB` : '–'),
    el('td', {}, p.rtt_ms === null ? '–' : `${p.rtt_ms.toFixed(1)} ms`),
  )));
}

// Processes running on each peer (by IP), for the graph's badges and the details.
function processesOn(ip) {
  const out = [];
  for (const j of grid.jobs) for (const p of j.processes) if (p.host === ip && p.status === 'running') out.push([j, p]);
  return out;
}

// The graph: one circle per group (domain, else subnet), its peers around its centre.
function renderGraph() {
  const svg = document.getElementById('graph');
  const groups = new Map();
  for (const p of grid.peers) {
    if (!groups.has(p.group)) groups.set(p.group, []);
    groups.get(p.group).push(p);
  }
  const items = [];
  const names = [...groups.keys()].sort();
  const cols = Math.max(1, Math.ceil(Math.sqrt(names.length)));
  const box = { x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity };
  names.forEach((g, i) => {
    const peers = groups.get(g);
    const cx = 200 + (i % cols) * 400, cy = 180 + Math.floor(i / cols) * 360;
    const r = Math.max(60, Math.min(150, 30 + peers.length * 14));
    items.push(el('svg:circle', { class: 'group', cx, cy, r: r + 28 }));
    box.x0 = Math.min(box.x0, cx - r - 40); box.x1 = Math.max(box.x1, cx + r + 40);
    box.y0 = Math.min(box.y0, cy - r - 60); box.y1 = Math.max(box.y1, cy + r + 40);
    items.push(el('svg:text', { class: 'group-label', x: cx, y: cy - r - 34, 'text-anchor': 'middle' }, g));
    peers.forEach((p, k) => {
      const a = (2 * Math.PI * k) / peers.length - Math.PI / 2;
      const x = peers.length === 1 ? cx : cx + r * Math.cos(a), y = peers.length === 1 ? cy : cy + r * Math.sin(a);
      const ip = p.address.replace(/:\d+$/, '');
      const n = processesOn(ip).length;
      items.push(el('svg:circle', {
        class: `node ${p.status}${p.address === selected ? ' selected' : ''}`, cx: x, cy: y, r: 16,
        'data-address': p.address, onclick: ev => { ev.stopPropagation(); select(p.address); },
      }, el('svg:title', {}, `${p.name} ${p.address} (${p.status})`)));
      items.push(el('svg:text', { class: 'node-label', x, y: y + 30, 'text-anchor': 'middle' }, p.label || p.name));
      if (n > 0) {
        items.push(el('svg:circle', { class: 'badge', cx: x + 13, cy: y - 13, r: 8 }));
        items.push(el('svg:text', { class: 'badge-text', x: x + 13, y: y - 9.5, 'text-anchor': 'middle' }, n));
      }
    });
  });
  svg.replaceChildren(...items);
  if (!moved && names.length > 0) {
    // Fitted: everything in view, the aspect of the box kept.
    const w = Math.max(box.x1 - box.x0, (box.y1 - box.y0) * 800 / 360);
    view.w = w; view.h = w * 360 / 800;
    view.x = (box.x0 + box.x1 - view.w) / 2; view.y = (box.y0 + box.y1 - view.h) / 2;
  }
  svg.setAttribute('viewBox', `${view.x} ${view.y} ${view.w} ${view.h}`);
}

function renderDetails() {
  const box = document.getElementById('details');
  const p = grid.peers.find(q => q.address === selected);
  if (!p) {
    box.replaceChildren(el('p', { class: 'hint' }, 'Click a peer in the graph or the table.'));
    return;
  }
  const rows = [
    ['Name', p.name], ['Address', p.address], ['Status', p.status], ['Why', p.error],
    ['OS', p.os], ['CPUs', p.cpus], ['Load (1 min)', p.load1 === null ? null : p.load1.toFixed(2)],
    ['Memory', p.mem_total_kb ? `${gib(p.mem_available_kb)} GiB free of ${gib(p.mem_total_kb)} GiB` : null],
    ['Slots', slots(p)], ['Domain', p.domain], ['Subnet', p.subnet],
    ['RTT', p.rtt_ms === null ? null : `${p.rtt_ms.toFixed(2)} ms`],
    ['Last seen by a supernode', `${(p.last_seen_ms / 1000).toFixed(1)} s ago`],
  ];
  const dl = el('dl', {});
  for (const [k, v] of rows) if (v !== null && v !== undefined) dl.append(el('dt', {}, k), el('dd', {}, v));
  const procs = processesOn(p.address.replace(/:\d+$/, ''));
  dl.append(el('dt', {}, 'Processes'), el('dd', {}, procs.length === 0 ? 'none' :
    procs.map(([j, q]) => `${j.program} rank ${q.rank}` + (j.replicas > 1 ? ` replica ${q.replica}` : '') + (q.master ? ' (master)' : '')).join(', ')));
  box.replaceChildren(dl);
}

function renderJobs() {
  const box = document.getElementById('jobs');
  if (grid.jobs.length === 0) {
    box.replaceChildren(el('p', { class: 'hint' }, 'No job.'));
    return;
  }
  box.replaceChildren(...grid.jobs.map(j => {
    const ranks = new Map();
    for (const p of j.processes) {
      if (!ranks.has(p.rank)) ranks.set(p.rank, []);
      ranks.get(p.rank).push(p);
    }
    const table = el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'Rank'), el('th', {}, 'Replicas (host, state)'))));
    const body = el('tbody', {});
    for (const [rank, ps] of [...ranks.entries()].sort((a, b) => a[0] - b[0])) {
      body.append(el('tr', {}, el('td', {}, rank), el('td', {}, ...ps.map(p => el('span', {
        class: `proc ${p.status}${p.master ? ' master' : ''}`,
        'data-rank': p.rank, 'data-replica': p.replica, 'data-status': p.status, 'data-host': p.host,
        title: p.failure || (p.pid ? `pid ${p.pid}` : ''),
      }, (j.replicas > 1 ? `r${p.replica} ` : '') + `${p.host} ` + (p.master ? '★ master' : p.status))))));
    }
    table.append(body);
    const counts = el('span', { class: 'counts' },
      el('span', { class: j.failures ? 'bad' : '' }, `${j.failures} failure(s)`), ', ',
      `${j.takeovers} takeover(s)`);
    return el('div', { class: `job ${j.state}`, 'data-job': j.job, 'data-program': j.program },
      el('h3', {}, `${j.program} `, el('span', { class: 'meta' },
        `job ${shortJob(j.job)} · ${j.state} · ${ranks.size} rank(s) × ${j.replicas} replica(s)` +
        (j.submitter ? ` · submitted from ${j.submitter}` : '') + ' · '), counts),
      table);
  }));
}

function renderLog() {
  const events = [];
  for (const j of grid.jobs) for (const e of j.events) if (e.kind !== 'ended' || j.failures > 0) events.push([j, e]);
  events.sort((a, b) => b[1].at_ms - a[1].at_ms);
  document.getElementById('log').replaceChildren(...events.slice(0, 50).map(([j, e]) =>
    el('li', { class: e.kind }, `${time(e.at_ms)} ${j.program} (${shortJob(j.job)}): ${e.kind}` +
      (e.kind === 'ended' ? '' : ` rank ${e.rank} replica ${e.replica} on ${e.host}`) + (e.detail ? ` — ${e.detail}` : ''))));
}

function render() {
  if (!grid) return;
  const up = grid.peers.filter(p => p.status === 'up').length;
  const running = grid.jobs.filter(j => j.state === 'running').length;
  document.getElementById('summary').textContent = grid.error
    ? `error: ${grid.error}`
    : `${grid.peers.length} peer(s), ${up} up · ${running} job(s) running · supernode(s) ${grid.supernodes.join(', ')}${grid.revoked && grid.revoked.length ? ' · revoked: ' + grid.revoked.join(', ') : ''} · updated ${grid.updated_ms ? time(grid.updated_ms) : 'not yet'}`;
  renderPeers();
  renderGraph();
  renderDetails();
  renderJobs();
  renderLog();
}

// Zoom (wheel) and pan (drag) of the graph.
function setupGraph() {
  const svg = document.getElementById('graph');
  svg.addEventListener('wheel', ev => {
    ev.preventDefault();
    moved = true;
    const k = ev.deltaY > 0 ? 1.15 : 1 / 1.15;
    const r = svg.getBoundingClientRect();
    const fx = (ev.clientX - r.left) / r.width, fy = (ev.clientY - r.top) / r.height;
    const w = Math.min(8000, Math.max(100, view.w * k)), h = w * view.h / view.w;
    view.x += (view.w - w) * fx; view.y += (view.h - h) * fy; view.w = w; view.h = h;
    svg.setAttribute('viewBox', `${view.x} ${view.y} ${view.w} ${view.h}`);
  }, { passive: false });
  let drag = null;
  svg.addEventListener('mousedown', ev => { drag = { x: ev.clientX, y: ev.clientY }; svg.classList.add('dragging'); });
  window.addEventListener('mouseup', () => { drag = null; svg.classList.remove('dragging'); });
  window.addEventListener('mousemove', ev => {
    if (!drag) return;
    moved = true;
    const r = svg.getBoundingClientRect();
    view.x -= (ev.clientX - drag.x) * view.w / r.width;
    view.y -= (ev.clientY - drag.y) * view.h / r.height;
    drag = { x: ev.clientX, y: ev.clientY };
    svg.setAttribute('viewBox', `${view.x} ${view.y} ${view.w} ${view.h}`);
  });
}

function connect() {
  const conn = document.getElementById('conn');
  const es = new EventSource('api/events?token=' + encodeURIComponent(token));
  es.addEventListener('grid', ev => {
    grid = JSON.parse(ev.data);
    conn.textContent = 'live';
    conn.className = 'conn live';
    render();
  });
  es.onerror = () => { conn.textContent = 'reconnecting…'; conn.className = 'conn lost'; };
}

setupGraph();
connect();
