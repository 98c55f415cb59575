import type { AppContext } from '../../context.js';
import { authOf, requirePermission, SECURED } from '../../http/auth.js';
import { absentBodyIsEmpty, type App } from '../../http/types.js';
import { errorResponses } from '../../shared/schemas.js';
import { SessionsListBody, SessionsListResponse } from './sessions.schemas.js';
import { AdminSessionsService } from './sessions.service.js';

/** POST /api/admin/sessions (spec "Administration", contract §7). */
export async function adminSessionsRoutes(app: App, ctx: AppContext): Promise<void> {
  const service = new AdminSessionsService(ctx);

  app.post(
    '/api/admin/sessions',
    {
      schema: {
        tags: ['admin'],
        summary: 'Search login sessions',
        description:
          'Login sessions {_id, user: {_id, email, fname, lname}, account, institution, ip, ua, created, lastActivityAt, expiresAt, revoked}, ' +
          'newest first (created, then id, descending). Scope: a superadmin sees all; an account admin the sessions of users of its account ' +
          '(and sessions opened in institutions it administers elsewhere); an institution admin the sessions opened in (switched to) the ' +
          'institutions it administers; anyone else 403. The sessions of superadmins are listed to superadmins only. As in a user record ' +
          "(GET /api/admin/user/{id}), account (the user's home account) is null unless it is one of the caller's accounts (its home " +
          'account or that of an institution it is enrolled in), and institution is null unless the caller may see that institution (of ' +
          "one of its accounts, or one it is enrolled in): a session of another tenant's user opened in the caller's institution does not " +
          "show that user's account, and a session of the caller's user opened in another tenant's institution does not show that " +
          'institution (a superadmin sees all). ' +
          'Filters: account (space-separated ids: sessions of users of those accounts, or opened in their institutions; an id that is ' +
          "not one of the caller's accounts, as above, matches no session, so only such ids list nothing (total 0) and with other ids " +
          'they add no session; a superadmin sees all), institution (sessions opened in it; an institution the caller may not see, as ' +
          'above, matches no session (total 0), as does one that does not exist; a superadmin finds the sessions of any id, one of an ' +
          'institution since deleted too), usersearch (literal ' +
          'case-insensitive substring of e-mail, first or last name), daterange [start, end] (sessions active during it: created before ' +
          'its end and last active after its start; default the last 30 days; start after end is a 400, and so is an entry that is a leap second (23:59:60), has an offset without minutes or falls outside the years 1 to 9999 in UTC). page ≥ 1; pageSize 1..5000, ' +
          'default 100; limitsearch is a deprecated alias of pageSize (pageSize wins). Every field is optional; no body lists with the defaults.',
        security: SECURED,
        body: SessionsListBody,
        response: { 200: SessionsListResponse, ...errorResponses(400, 401, 403) },
      },
      preValidation: [
        ...requirePermission(ctx, 'admin.sessions.read'),
        absentBodyIsEmpty,
      ],
    },
    async (request) => service.list(authOf(request), request.body),
  );
}
