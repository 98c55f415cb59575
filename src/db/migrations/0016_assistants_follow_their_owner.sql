-- An assistant goes with its owner: with ON DELETE SET NULL, deleting a user turned their assistants (private
-- ones too, instructions and all) into system assistants, since a null owner is what marks a system assistant.
-- Rows a user deletion already left ownerless before this migration cannot be told apart from genuine system
-- assistants (nothing else records who created them), so they are left as they are: an admin can review them
-- in POST /api/admin/assistants {system_only: true} and delete the ones that are not meant to be shared.
ALTER TABLE "assistants" DROP CONSTRAINT "assistants_owner_user_id_users_id_fk";
--> statement-breakpoint
ALTER TABLE "assistants" ADD CONSTRAINT "assistants_owner_user_id_users_id_fk" FOREIGN KEY ("owner_user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;
