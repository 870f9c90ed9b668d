#!/usr/bin/env node
// Commit messages from BASE on (CONTRIBUTING.md, "Commits"): a subject of at most 72 characters
// and, when there is a body, a blank second line. Commits up to BASE are history and keep the
// subjects they have. Merge commits are checked too, except git's own "Merge branch '...'"
// subjects, which a long branch name can push past the limit.
//   node tools/check-commits.mjs              check BASE..HEAD (tools/dev test runs this)
//   node tools/check-commits.mjs --base REV   check REV..HEAD instead
//   node tools/check-commits.mjs --self-test  build a scratch repository with good and bad commits
//                                             and a shallow clone of it; exit 1 unless exactly the
//                                             bad ones are caught and the clone is skipped
// Where BASE is not in the clone (a shallow clone, another history) or there is no git checkout,
// it says so and exits 0: the check needs the history it checks.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** main's HEAD when the rule was introduced; older commits are not checked. */
export const BASE = 'bb5d9793317f43b2153cfbcfaf769b65e74317ed';
export const MAX_SUBJECT = 72;
/** The subjects git writes for a merge (git merge, git pull), whose length the branch name decides. */
const AUTO_MERGE = /^Merge (branch|branches|remote-tracking branch|remote-tracking branches|tag|commit) '/;

const git = (cwd, args) => execFileSync('git', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const ok = (cwd, args) => {
  try {
    git(cwd, args);
    return true;
  } catch {
    return false;
  }
};

/**
 * The problems of the commits in base..HEAD of the checkout at `cwd`, or why none were checked.
 * @returns {{ skipped?: string, checked: number, problems: string[], notes: string[] }}
 */
export function checkCommits(cwd, base = BASE) {
  const none = (skipped) => ({ skipped, checked: 0, problems: [], notes: [] });
  if (!ok(cwd, ['rev-parse', '--is-inside-work-tree'])) return none('not a git checkout');
  if (!ok(cwd, ['cat-file', '-e', `${base}^{commit}`])) {
    const shallow = git(cwd, ['rev-parse', '--is-shallow-repository']).trim() === 'true';
    return none(
      `the base commit ${base.slice(0, 12)} is not in this clone${shallow ? ' (a shallow clone: git fetch --unshallow to check)' : ''}`,
    );
  }
  if (!ok(cwd, ['merge-base', '--is-ancestor', base, 'HEAD']))
    return none(`HEAD does not descend from the base commit ${base.slice(0, 12)}`);
  const log = git(cwd, ['log', '--format=%H%x00%P%x00%B%x1e', `${base}..HEAD`]);
  const problems = [];
  const notes = [];
  let checked = 0;
  for (const record of log.split('\x1e')) {
    if (!record.trim()) continue;
    const [hash, parents, message] = record.replace(/^\n/, '').split('\x00');
    const lines = message.replace(/\n+$/, '').split('\n');
    const subject = lines[0];
    const length = [...subject].length;
    const short = hash.slice(0, 10);
    checked++;
    if (parents.trim().split(' ').length > 1 && AUTO_MERGE.test(subject) && length > MAX_SUBJECT) {
      notes.push(`${short} ${subject}: git's merge subject, ${length} characters (not checked)`);
      continue;
    }
    if (!subject.trim()) problems.push(`${short}: empty subject`);
    if (length > MAX_SUBJECT) problems.push(`${short} ${subject}: subject of ${length} characters (at most ${MAX_SUBJECT})`);
    if (lines.length > 1 && lines[1].trim() !== '')
      problems.push(`${short} ${subject}: the second line must be blank (subject, blank line, body)`);
  }
  return { checked, problems, notes };
}

function report(result, base) {
  if (result.skipped) {
    console.log(`check-commits: skipped, ${result.skipped}`);
    return 0;
  }
  for (const n of result.notes) console.log(`check-commits: ${n}`);
  for (const p of result.problems) console.error(`check-commits: ${p}`);
  if (result.problems.length) {
    console.error(
      `check-commits: ${result.problems.length} problem(s) in ${result.checked} commit(s) after ${base.slice(0, 12)}; reword them (git rebase -i ${base.slice(0, 12)}, "reword") before merging`,
    );
    return 1;
  }
  console.log(`check-commits: ${result.checked} commit(s) after ${base.slice(0, 12)}, subjects within ${MAX_SUBJECT} characters`);
  return 0;
}

/** A scratch repository with known good and bad commits; true when exactly the bad ones are caught. */
export function selfTest() {
  const dir = mkdtempSync(join(tmpdir(), 'check-commits-'));
  const env = [
    '-c',
    'user.name=check',
    '-c',
    'user.email=check@example.invalid',
    '-c',
    'commit.gpgsign=false',
    '-c',
    'core.hooksPath=/dev/null',
  ];
  const run = (args, cwd = dir) => git(cwd, [...env, ...args]);
  const commit = (message) => run(['commit', '-q', '--allow-empty', '-m', message]);
  try {
    run(['init', '-q', '-b', 'main']);
    commit(`history: ${'an old subject that is far too long to pass the rule, '.repeat(2)}`);
    const base = run(['rev-parse', 'HEAD']).trim();
    commit('A good subject\n\nWith a body that says why.');
    commit('x'.repeat(MAX_SUBJECT));
    commit('a subject of seventy-three characters, one past the limit of this check!!');
    commit('No blank line\nafter the subject');
    run(['checkout', '-q', '-b', 'a-branch-whose-name-is-long-enough-to-push-the-subject-past-the-limit']);
    commit('On the branch');
    run(['checkout', '-q', 'main']);
    commit('On main');
    run(['merge', '-q', '--no-ff', '--no-edit', 'a-branch-whose-name-is-long-enough-to-push-the-subject-past-the-limit']);
    run(['checkout', '-q', '-b', 'other']);
    commit('On other');
    run(['checkout', '-q', 'main']);
    run([
      'merge',
      '-q',
      '--no-ff',
      '-m',
      `Merge other: a merge subject written by hand ${'is checked as any other subject, '.repeat(2).trim()}`,
      'other',
    ]);
    const got = checkCommits(dir, base);
    const want = ['Merge other: a merge subject', 'No blank line: the second line', 'one past the limit of this check!!: subject of 73'];
    const failures = [];
    const caught = want.filter((w) => got.problems.some((p) => p.includes(w)));
    if (caught.length !== want.length || got.problems.length !== want.length)
      failures.push(`caught ${JSON.stringify(got.problems)}, expected one problem each for ${JSON.stringify(want)}`);
    if (got.notes.length !== 1) failures.push(`expected one long auto merge subject to be let through, got ${JSON.stringify(got.notes)}`);
    // A shallow clone without the base commit: skipped, not failed.
    const clone = join(dir, 'shallow');
    git(dir, ['clone', '-q', '--depth', '1', `file://${dir}`, clone]);
    const shallow = checkCommits(clone, base);
    if (!shallow.skipped || shallow.problems.length) failures.push(`a shallow clone was not skipped: ${JSON.stringify(shallow)}`);
    for (const f of failures) console.error(`check-commits --self-test: ${f}`);
    if (!failures.length)
      console.log('check-commits --self-test: a long subject, a missing blank line and a long hand-written merge subject are caught');
    return !failures.length;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (process.argv.includes('--self-test')) process.exit(selfTest() ? 0 : 1);
  const i = process.argv.indexOf('--base');
  const base = i >= 0 ? process.argv[i + 1] : BASE;
  const root = join(fileURLToPath(import.meta.url), '..', '..');
  process.exit(report(checkCommits(root, base), base));
}
