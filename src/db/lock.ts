import { randomBytes } from 'node:crypto';
import { linkSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { StartupError } from '../shared/errors.js';

/** Lock files this process holds: a lock naming our pid that is not in here is a leftover. */
const heldLocks = new Set<string>();

/**
 * The embedded database is one process's: a second process opening the same folder (say `cli
 * seed-demo` while the server runs) would not be seen by the first and could corrupt it. A lock file
 * names its owner by pid and process start time; a lock whose owner is gone (or whose pid now belongs
 * to another process, as after a container restart) is taken over.
 */
export function lockDataDir(dataDir: string): () => void {
  const lockPath = `${realpathSync(dataDir)}.lock`;
  if (heldLocks.has(lockPath)) throw inUse(dataDir, process.pid, true);
  const me = `${process.pid} ${processStartTicks(process.pid) ?? ''}`.trim();
  for (let attempt = 0; attempt < 3; attempt++) {
    // Written aside, then linked into place: the lock never exists without its owner in it.
    const tmp = `${lockPath}.${process.pid}.${randomBytes(4).toString('hex')}`;
    writeFileSync(tmp, me);
    try {
      linkSync(tmp, lockPath);
      heldLocks.add(lockPath);
      let released = false;
      const release = () => {
        if (released) return;
        released = true;
        heldLocks.delete(lockPath);
        rmSync(lockPath, { force: true });
        process.off('exit', release);
      };
      process.on('exit', release);
      return release;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const [pidText, ticks] = readFileSync(lockPath, 'utf8').trim().split(' ');
      const owner = Number(pidText);
      if (ownerAlive(owner, ticks)) throw inUse(dataDir, owner, false);
      rmSync(lockPath, { force: true }); // a leftover: its owner is gone
    } finally {
      rmSync(tmp, { force: true });
    }
  }
  throw new Error(`Could not lock the embedded database in ${dataDir}`);
}

function inUse(dataDir: string, pid: number, self: boolean): Error {
  return new StartupError(
    `The embedded database in ${dataDir} is in use by process ${pid}${self ? ' (this one)' : ''}. ` +
      'Stop that process first, or use DATABASE_URL (PostgreSQL) to run several processes on one database.',
  );
}

function ownerAlive(pid: number, startTicks: string | undefined): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  // Our own pid but not a lock we hold: left by an earlier process that had the same pid.
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const now = processStartTicks(pid);
  return !startTicks || !now || now === startTicks;
}

/** Start time of a process in clock ticks since boot (Linux), to tell a reused pid from its old owner. */
function processStartTicks(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

