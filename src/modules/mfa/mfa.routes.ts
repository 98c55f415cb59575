import type { AppContext } from '../../context.js';
import type { App } from '../../http/types.js';
import type { IdentityService } from '../identity/identity.service.js';

/** MFA enrolment, login second factor, trusted devices, dev outbox (issue: MFA). */
export async function mfaRoutes(_app: App, _ctx: AppContext, _identity: IdentityService): Promise<void> {}
