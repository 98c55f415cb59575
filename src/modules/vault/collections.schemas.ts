import { Type } from '@fastify/type-provider-typebox';
import { UUID_PATTERN } from '../../shared/ids.js';
import { Id, Nullable } from '../../shared/schemas.js';
import { CollectionSchema } from './collections.presenters.js';
import { FileStatusFilterSchema } from './uploads.schemas.js';

/**
 * A string or null with one keyword (pattern or format), as a single JSON-schema type list rather than an
 * anyOf, so that a bad value gets one clear validation detail.
 */
export const NullableString = (keywords: { pattern?: string; format?: string }, description: string) =>
  Type.Unsafe<string | null>({ type: ['string', 'null'], ...keywords, description });

export const ScopeSchema = Type.Enum(['personal', 'instance', 'account'], {
  description: 'Vault scope: personal (only you), instance (members of one institution), account (members of every institution of the account)',
});

const Name = Type.String({ minLength: 1, maxLength: 200, pattern: '\\S', description: 'Collection name, 1 to 200 characters; invisible format characters (Unicode Cf: zero-width, bidi controls) are removed and surrounding spaces trimmed; what remains must not be blank' });
const COLOR_PATTERN = '^#[0-9a-fA-F]{6}$';
const Color = NullableString({ pattern: COLOR_PATTERN }, 'Hex colour #rrggbb; null for none');

export const CollectionEnvelope = Type.Object({ success: Type.Boolean(), data: CollectionSchema });
export const CollectionListEnvelope = Type.Object({ success: Type.Boolean(), data: Type.Array(CollectionSchema) });

export const CreateCollectionBody = Type.Object({
  name: Name,
  institution: Type.Optional(Id('Institution of an instance or account collection; defaults to your current institution')),
  account_shared: Type.Optional(Type.Boolean({ description: 'true: the collection is shared with the whole account (scope account)' })),
  parent: Type.Optional(NullableString({ pattern: UUID_PATTERN }, 'Parent collection (a visible collection of the same scope); null or absent: the vault root')),
  color: Type.Optional(Color),
  scope: Type.Optional(ScopeSchema),
});

export const ListCollectionsQuery = Type.Object({
  parent: Type.Optional(Id('List the sub-collections of this collection; absent: the vault root')),
  scope: Type.Optional(ScopeSchema),
  institution: Type.Optional(Id('Institution whose instance and account collections are listed; defaults to your current institution')),
});

export const PatchCollectionBody = Type.Object({
  name: Type.Optional(Name),
  color: Type.Optional(Color),
  parent: Type.Optional(NullableString({ pattern: UUID_PATTERN }, 'New parent (same scope, not the collection itself nor one of its descendants); null: move to the vault root')),
});

export const DeleteCollectionResponse = Type.Object({
  success: Type.Boolean(),
  message: Type.String(),
  data: Type.Object({
    _id: Type.String(),
    movedTo: Nullable(Type.String({ description: 'Where the content went: the parent collection id, or null for the vault root' })),
    movedFiles: Type.Number({ description: "Files moved that the caller may see (another member's private files move too, uncounted)" }),
    movedCollections: Type.Number(),
  }),
});

export const SelectAllIdsBody = Type.Object({
  parent: Type.Optional(NullableString({ pattern: UUID_PATTERN }, 'Collection to select within; null or absent: the vault root')),
  institution: Type.Optional(Id('Overrides your current institution (instance and account scope at the root)')),
  scope: Type.Optional(ScopeSchema),
  fileNameSearch: Type.Optional(Type.String({ maxLength: 500, description: 'Case-insensitive substring of the original file name, matched literally (spaces included; a blank one is no filter), read as names are stored: NFC, a run of whitespace as one space' })),
  status: Type.Optional(FileStatusFilterSchema),
});

const IdName = Type.Object({ _id: Type.String(), originalname: Type.String() });

export const SelectAllIdsResponse = Type.Object({
  success: Type.Boolean(),
  files: Type.Array(IdName),
  collections: Type.Array(Type.Object({ _id: Type.String(), name: Type.String(), fileCount: Type.Number() })),
  fileIds: Type.Array(Type.String()),
  collectionIds: Type.Array(Type.String()),
  totalFiles: Type.Number(),
  filtered: Type.Boolean(),
});

export const CollectionIdParams = Type.Object({ id: Id('Collection id') });
