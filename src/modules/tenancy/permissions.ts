/**
 * The one place that maps roles to permissions (contract §2).
 *
 * Roles: `superadmin` (global), `accountadmin` (the user's home account), `admin` and `user`
 * (per institution, on a membership). A permission held through a role applies only inside that
 * role's scope: the policy functions below take the target's institution/account into account.
 */
export const PERMISSIONS = [
  'admin.access',
  'accounts.create',
  'accounts.read',
  'accounts.edit',
  'accounts.delete',
  'institutions.create',
  'institutions.read',
  'institutions.edit',
  'institutions.delete',
  'institutions.credits',
  'users.create',
  'users.read',
  'users.edit',
  'users.delete',
  'users.credits',
  /** Creating credits (top-ups, opening balances, corrections): superadmins only. */
  'credits.mint',
  /** Moving credits between balances the caller administers. */
  'credits.transfer',
  'memberships.edit',
  'admin.sessions.read',
  'admin.feedbacks.read',
  'admin.assistants.read',
  'admin.memory.read',
  'admin.memory.delete',
  'settings.admin',
  'vault.admin',
  'sso.manage',
  'sso.test',
] as const;

export type Permission = (typeof PERMISSIONS)[number];
export type GlobalRole = 'superadmin' | 'accountadmin' | 'user';
export type InstitutionRole = 'admin' | 'user';
export const GLOBAL_ROLES: readonly GlobalRole[] = ['superadmin', 'accountadmin', 'user'];
export const INSTITUTION_ROLES: readonly InstitutionRole[] = ['admin', 'user'];

const INSTITUTION_ADMIN: readonly Permission[] = [
  'admin.access',
  'institutions.read',
  'institutions.edit',
  'users.read',
  'users.create',
  'users.edit',
  'memberships.edit',
  'admin.sessions.read',
  'admin.feedbacks.read',
  'admin.assistants.read',
  'admin.memory.read',
  'admin.memory.delete',
  'settings.admin',
  'vault.admin',
  'sso.test',
];

const ACCOUNT_ADMIN: readonly Permission[] = [
  ...INSTITUTION_ADMIN,
  'accounts.read',
  'accounts.edit',
  'institutions.create',
  'institutions.delete',
  'institutions.credits',
  'users.delete',
  'users.credits',
  'credits.transfer',
  'sso.manage',
];

export const ROLE_PERMISSIONS: Record<GlobalRole | 'admin', ReadonlySet<Permission>> = {
  superadmin: new Set(PERMISSIONS),
  accountadmin: new Set(ACCOUNT_ADMIN),
  admin: new Set(INSTITUTION_ADMIN),
  user: new Set(),
};

/** What the policy needs to know about the caller. */
export interface Principal {
  userId: string;
  accountId: string;
  role: GlobalRole;
  /** institutionId → role and the institution's account. */
  memberships: ReadonlyMap<string, { role: InstitutionRole; accountId: string }>;
}

/** Whether the caller holds the permission in at least one scope (gate of a route). */
export function holdsPermission(p: Principal, permission: Permission): boolean {
  if (ROLE_PERMISSIONS[p.role].has(permission)) return true;
  for (const m of p.memberships.values()) {
    if (m.role === 'admin' && ROLE_PERMISSIONS.admin.has(permission)) return true;
  }
  return false;
}

/** Whether the caller may exercise the permission on this account (as a whole). */
export function canInAccount(p: Principal, permission: Permission, accountId: string): boolean {
  if (p.role === 'superadmin') return true;
  return p.role === 'accountadmin' && p.accountId === accountId && ROLE_PERMISSIONS.accountadmin.has(permission);
}

/** Whether the caller may exercise the permission on this institution. */
export function canInInstitution(p: Principal, permission: Permission, institution: { id: string; accountId: string }): boolean {
  if (canInAccount(p, permission, institution.accountId)) return true;
  const m = p.memberships.get(institution.id);
  return m?.role === 'admin' && ROLE_PERMISSIONS.admin.has(permission);
}

/** Institutions where the caller holds the permission through an institution-admin membership. */
export function adminInstitutionIds(p: Principal, permission: Permission): string[] {
  if (!ROLE_PERMISSIONS.admin.has(permission)) return [];
  return [...p.memberships.entries()].filter(([, m]) => m.role === 'admin').map(([id]) => id);
}

/**
 * The tenant scope of an admin listing: everything (superadmin), one account (accountadmin), or the
 * institutions the caller administers. `null` means the caller may list nothing.
 */
export type AdminScope = { kind: 'all' } | { kind: 'account'; accountId: string; institutionIds: string[] } | { kind: 'institutions'; institutionIds: string[] };

export function adminScope(p: Principal, permission: Permission): AdminScope | null {
  if (p.role === 'superadmin') return { kind: 'all' };
  if (p.role === 'accountadmin' && ROLE_PERMISSIONS.accountadmin.has(permission)) {
    return { kind: 'account', accountId: p.accountId, institutionIds: adminInstitutionIds(p, permission) };
  }
  const ids = adminInstitutionIds(p, permission);
  return ids.length > 0 ? { kind: 'institutions', institutionIds: ids } : null;
}
