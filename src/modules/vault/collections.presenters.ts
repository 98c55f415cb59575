import { Type } from '@fastify/type-provider-typebox';
import { DateTime, Nullable } from '../../shared/schemas.js';
import type { CollectionRow } from './collections.repository.js';

/** A collection (a folder of the vault tree) as the API shows it. */
export const CollectionSchema = Type.Object(
  {
    _id: Type.String(),
    name: Type.String(),
    color: Nullable(Type.String({ description: '#rrggbb or null' })),
    scope: Type.String({ description: 'personal | instance | account' }),
    parent: Nullable(Type.String({ description: 'Parent collection id; null at the vault root' })),
    institution: Nullable(Type.String({ description: 'Institution id (null for personal collections; the originating institution for account ones)' })),
    account_shared: Type.Boolean({ description: 'true exactly when scope is account (derived from the scope, not stored)' }),
    created: DateTime(),
    updated: DateTime(),
    fileCount: Type.Number({ description: 'Files directly in this collection (not in sub-collections) that you can see, excluding deleted ones' }),
  },
  { $id: 'Collection' },
);

export function presentCollection(c: CollectionRow) {
  return {
    _id: c.id,
    name: c.name,
    color: c.color,
    scope: c.scope,
    parent: c.parentId,
    institution: c.institutionId,
    account_shared: c.scope === 'account',
    created: c.createdAt.toISOString(),
    updated: c.updatedAt.toISOString(),
    fileCount: c.fileCount,
  };
}
